"""The torch side of bench/torch_compile_ref.py: the CS336 TransformerLM as an nn.Module and the
CUDA-event timing of eager, torch.compile and torch.compile(mode="reduce-overhead") rows.
Imported only once torch and a CUDA device are known to exist."""
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F



def trunc_normal(shape, std):
    w = torch.empty(shape)
    nn.init.trunc_normal_(w, std=std, a=-3 * std, b=3 * std)
    return nn.Parameter(w)


class Linear(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.weight = trunc_normal((d_out, d_in), math.sqrt(2 / (d_in + d_out)))

    def forward(self, x):
        return x @ self.weight.t()


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        dtype = x.dtype
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(dtype)


def rope(x, cos, sin):  # x [B, H, T, dh]; adjacent pairs (x[2i], x[2i+1]) rotated
    pairs = x.unflatten(-1, (-1, 2))
    x1, x2 = pairs[..., 0], pairs[..., 1]
    return torch.stack((cos * x1 - sin * x2, sin * x1 + cos * x2), -1).flatten(-2)


class Block(nn.Module):
    def __init__(self, d, dff, heads, eps):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = RMSNorm(d, eps), RMSNorm(d, eps)
        self.q_proj, self.k_proj, self.v_proj, self.output_proj = (Linear(d, d) for _ in range(4))
        self.w1, self.w2, self.w3 = Linear(d, dff), Linear(dff, d), Linear(d, dff)

    def attend(self, q, k, v, causal):
        """Naive causal attention, as fusec's eager reference; bench/torch_ddp_ref.py overrides it
        with SDPA (a subclass passed as TransformerLM's `block`), the rest of the model shared."""
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        return torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ v

    def forward(self, x, cos, sin, causal):
        B, T, D = x.shape
        h = self.ln1(x)
        heads = lambda proj: proj(h).view(B, T, self.heads, D // self.heads).transpose(1, 2)
        q, k, v = rope(heads(self.q_proj), cos, sin), rope(heads(self.k_proj), cos, sin), heads(self.v_proj)
        attn = self.attend(q, k, v, causal).transpose(1, 2).reshape(B, T, D)
        x = x + self.output_proj(attn)
        h2 = self.ln2(x)
        return x + self.w2(F.silu(self.w1(h2)) * self.w3(h2))


class TransformerLM(nn.Module):
    def __init__(self, c, block=Block):  # c: fusec's configuration of the model (torch_compile_ref.model_config)
        super().__init__()
        d, heads, eps = c["d_model"], c["heads"], c["eps"]
        self.vocab = c["vocab"]
        self.token_embeddings = nn.Embedding(self.vocab, d)
        nn.init.trunc_normal_(self.token_embeddings.weight, std=1, a=-3, b=3)
        self.layers = nn.ModuleList(block(d, c["d_ff"], heads, eps) for _ in range(c["layers"]))
        self.ln_final = RMSNorm(d, eps)
        self.lm_head = Linear(d, self.vocab)
        dh = d // heads
        freqs = c["rope_theta"] ** -(torch.arange(0, dh, 2, dtype=torch.float32) / dh)
        angles = torch.outer(torch.arange(c["ctx"], dtype=torch.float32), freqs)
        self.register_buffer("cos", torch.cos(angles), persistent=False)
        self.register_buffer("sin", torch.sin(angles), persistent=False)

    def forward(self, ids):
        T = ids.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=ids.device).tril()
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.token_embeddings(ids)
        for block in self.layers:
            x = block(x, cos, sin, causal)
        return self.lm_head(self.ln_final(x))


def gemm_tflops(dtype, n=8192, iters=10):
    a = torch.full((n, n), 0.0115, device="cuda", dtype=dtype)
    b = torch.full((n, n), 0.0115, device="cuda", dtype=dtype)
    ms = time_calls(lambda: a @ b, 3, iters)
    return 2 * n ** 3 / (sorted(ms)[len(ms) // 2] * 1e-3) / 1e12


def time_calls(fn, warmup, iters):
    for _ in range(warmup):
        fn()
        torch.cuda.synchronize()
    ms = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        ms.append(start.elapsed_time(stop))
    return ms


def make_call(model, opt, impl, pass_, dtype, ids, targets):
    """The callable one timed iteration runs."""
    mode = {"eager": None, "torch.compile": "default", "torch.compile-ro": "reduce-overhead"}[impl]
    fwd = model if mode is None else torch.compile(model, mode=mode)
    step = opt.step if mode is None else torch.compile(opt.step, mode=mode)
    autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16")
    # reduce-overhead replays CUDA graphs whose outputs the next replay overwrites: each
    # iteration must say where it starts (else "accessing tensor output of CUDAGraphs that
    # has been overwritten by a subsequent run").
    new_iteration = torch.compiler.cudagraph_mark_step_begin if mode == "reduce-overhead" else (lambda: None)

    def loss_backward():
        new_iteration()
        opt.zero_grad(set_to_none=True)
        with autocast():
            logits = fwd(ids)
        F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1)).backward()

    if pass_ == "forward":
        def forward():
            new_iteration()
            with torch.no_grad(), autocast():
                fwd(ids)
        return forward
    if pass_ == "fwd_bwd":
        return loss_backward

    def train_step():
        loss_backward()
        step()
    return train_step


def strict_f32_and_ceilings():
    """Strict f32 GEMMs (as fusec's fp32) and this run's GEMM ceilings by dtype."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return {"bf16": gemm_tflops(torch.bfloat16), "fp32": gemm_tflops(torch.float32)}


def time_row(row, build, vocab, seed, iters, finish_row):
    """Times one row (its model, ctx, batch, dtype, pass, impl, warmup) on a fresh model from
    `build()` and AdamW, with uniform random ids and targets; OOM or an error becomes the
    row's status, so the sweep goes on. Shared by torch_compile_ref.py and torch_module_ref.py."""
    torch._dynamo.reset()  # every row compiles afresh: warm-up rows must see the compile
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = opt = None
    try:
        torch.manual_seed(seed)
        model = build().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        gen = torch.Generator().manual_seed(seed + 1)
        shape = (row["batch"], row["ctx"])
        ids = torch.randint(0, vocab, shape, generator=gen).cuda()
        targets = torch.randint(0, vocab, shape, generator=gen).cuda()
        call = make_call(model, opt, row["impl"], row["pass"], row["dtype"], ids, targets)
        finish_row(row, time_calls(call, row["warmup"], iters), torch.cuda.max_memory_allocated(),
                   torch.cuda.max_memory_reserved())
    except torch.cuda.OutOfMemoryError:
        row["status"] = "OOM"
    except Exception as e:  # one row's failure (a compile error) must not end the sweep
        row["status"] = (str(e).splitlines() or [type(e).__name__])[0]
    del model, opt
    print("%s ctx=%d batch=%d %s %s %s warmup=%d: %s" % (row["model"], row["ctx"], row["batch"], row["dtype"],
          row["pass"], row["impl"], row["warmup"],
          row["status"] if row["status"] != "OK" else "median %.3f ms" % row["median_ms"]), file=sys.stderr, flush=True)


def run(a, grid, make_row, finish_row, fill_speedups):
    ceilings = strict_f32_and_ceilings()
    rows = []
    for model_name, ctx, batch, dtype, pass_, impl, warmup in grid(a):
        row = make_row(model_name, ctx, batch, dtype, pass_, impl, warmup, a.iters, ceilings[dtype])
        config = a.configs[model_name]
        time_row(row, lambda: TransformerLM(config), config["vocab"], a.seed, a.iters, finish_row)
        rows.append(row)
    fill_speedups(rows)
    for row in rows:
        print(json.dumps(row))
    return 0
