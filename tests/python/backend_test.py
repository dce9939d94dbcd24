"""fusec as a torch.compile backend (frontend/python/fusec/dynamo.py, issue 43): models trained in
PyTorch's own loop with torch.optim.AdamW, forward and backward compiled by fusec, against the
same loop in eager PyTorch from the same weights and batches.

  --device cpu (CI; torch 1.13 has no Dynamo): through functorch's aot_module, which hands fusec
      the same AOTAutograd forward and backward graphs; fusec runs them on its interpreter.
  --device cuda (torch >= 2): torch.compile(model, backend="fusec"), with a planted graph break,
      a model with an op fusec does not map (it trains in PyTorch, with the one-line warning),
      strict=True refusing it in one line, and --hf adds transformers' GPT-2 and Llama.

Each model: fp32 losses within 1e-4 relative of eager over the steps; with --bf16 (CUDA),
autocast losses within 2e-2. Exit 77 (skip) with the reason where torch or the library is
missing."""
import argparse
import contextlib
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "frontend", "python"))
sys.path.insert(0, os.path.join(HERE, "models"))


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(77)


try:
    import torch
except ImportError:
    skip("no torch in this python3")

from fusec import runtime  # noqa: E402

try:
    runtime.library()
except runtime.FusecError as e:
    skip(str(e))


class Breaks(torch.nn.Module):
    """A model whose forward has a graph break between its layers (a print Dynamo cannot trace)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, ids):
        x = self.inner.token_embeddings(ids)
        half = len(self.inner.layers) // 2
        for b in self.inner.layers[:half]:
            x = b(x)
        torch._dynamo.graph_break()
        for b in self.inner.layers[half:]:
            x = b(x)
        return self.inner.lm_head(self.inner.ln_final(x))


class EmbedHead(torch.nn.Module):
    """An embedding and a head: what the two small models below put something between."""

    def __init__(self, vocab=37, d=16):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.head = torch.nn.Linear(d, vocab)


class Unmapped(EmbedHead):
    """A model with an op fusec has no mapping for (cumsum)."""

    def forward(self, ids):
        return self.head(torch.cumsum(self.embed(ids), dim=1) / ids.shape[1])


class WideSum(EmbedHead):
    """A bf16 sum taken in f32 (sum(..., dtype=torch.float32), as bf16 autocast's linear
    backward sums its bias gradient): the sum must read its operand as f32."""

    def forward(self, ids):
        h = self.embed(ids).to(torch.bfloat16)
        return self.head(h.float() + torch.sum(h, dim=1, keepdim=True, dtype=torch.float32))


class Noisy(EmbedHead):
    """A model that draws random numbers reading no input (torch.rand): never a constant."""

    def forward(self, ids):
        noise = torch.rand(ids.shape[0], ids.shape[1], self.embed.embedding_dim, device=ids.device)
        return self.head(self.embed(ids) + 1e-3 * noise)


def train(model, batches, steps, autocast):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    losses = []
    for ids, targets in batches[:steps]:
        with torch.autocast(ids.device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
            logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def check_mask_on_real_example(vocab, batch, seq):
    """The backend's example values are the first call's real tensors. A band mask (each query
    sees itself and the 2 keys before it) is not causal attention, also where V is zero at the
    first call (a zero-initialised projection) and masking changes nothing on that example;
    a band as wide as the sequence is the causal mask and is recognised, V zero or not."""
    import band_attention
    from fusec import dynamo

    class InlineBand(band_attention.BandAttentionLM):
        def __init__(self, window, zero_v):
            super().__init__(vocab_size=vocab, window=window, context_length=seq)
            self.window = window
            if zero_v:
                with torch.no_grad():
                    d = self.qkv.weight.shape[1]
                    self.qkv.weight[2 * d:] = 0

        def forward(self, ids):  # the band built in the graph (static), not read from a buffer
            i = torch.arange(ids.shape[1], device=ids.device)
            band = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - self.window)
            q, k, v = self.qkv(self.emb(ids)).chunk(3, dim=-1)
            s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
            return self.head(s.masked_fill(~band, float("-inf")).softmax(-1) @ v)

    good, seen = True, []
    for window, zero, want in ((3, True, False), (3, False, False), (seq, False, True)):
        torch.manual_seed(0)
        before = set(id(c) for c in dynamo.COMPILED)
        dynamo.aot_module(InlineBand(window, zero))(torch.randint(0, vocab, (batch, seq))).sum().backward()
        graphs = [c for c in dynamo.COMPILED if id(c) not in before and c.program is not None]
        fused = any("= attention(" in c.fir for c in graphs)
        seen.append(f"window {window}{', V zero' if zero else ''}: {'attention' if fused else 'explicit softmax'}")
        good &= len(graphs) == 2 and fused == want
    print(f"{'ok  ' if good else 'FAIL'} masks judged on the first call's real values: " + "; ".join(seen))
    return good


def check_mask_values():
    """attention.causal_of: an additive causal mask filled with float16's lowest (what
    transformers builds under bf16 autocast, -65536 in bf16) is causal attention; a mask
    whose masked entries are only -100 is refused (softmax would still weigh them)."""
    from fusec.attention import causal_of
    from fusec.common import ExportError

    class Conv:
        pass
    conv, mask = Conv(), "mask"
    good = True
    for fill, want in ((torch.finfo(torch.float16).min, True), (torch.finfo(torch.float32).min, True), (-100.0, None)):
        m = torch.full((4, 4), fill).triu(1).to(torch.bfloat16)
        conv.static, conv.real = {mask: m}, {mask: m}
        try:
            got = causal_of(conv, mask, False, 4, 4)
        except ExportError:
            got = None
        good &= got == want
    print(f"{'ok  ' if good else 'FAIL'} SDPA masks: float16's and float32's lowest are -inf, -100 is refused")
    # SDPA with attention dropout: the backend refuses it in the forward (its backward graph
    # would have SDPA's own backward with dropout, which fusec has no mapping for).
    from fusec.attention import sdpa
    conv.train_dropout = conv.dropout_masks = True
    try:
        sdpa(conv, None, None, None, None, None, 0.1, True, None)
        refused = False
    except ExportError as e:
        refused = "dropout_p > 0" in str(e)
    print(f"{'ok  ' if refused else 'FAIL'} SDPA with dropout_p > 0 is refused by the backend's forward")
    return good and refused


def check_dropout(device):
    """Dropout compiled by fusec (native_dropout as fusec's dropout op, keyed afresh each call
    from torch's generator): about 1 - p of the elements kept, each scaled by 1 / (1 - p), the
    backward applying the forward's mask (w's gradient is the kept x's sum, scaled), and the
    next call drawing another mask. torch 1.13 traces dropout on the CPU as bernoulli_: its
    F.dropout is captured as native_dropout here, as the exporter does."""
    from fusec import dynamo
    from fusec.capture import _dropout_as_native

    class Dropped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.full((64,), 1.5, device=device))
            self.drop = torch.nn.Dropout(0.25)

        def forward(self, x):
            return self.drop(x * self.w)

    torch.manual_seed(5)
    x = torch.rand(32, 64, device=device) + 0.5
    before = dynamo.STATS["fusec"]
    m = dynamo.aot_module(Dropped(), guarded=True) if not hasattr(torch, "compile") else torch.compile(Dropped(), backend="fusec")
    with _dropout_as_native():
        y = m(x)
        y.sum().backward()
        y2 = m(x)
    kept = y != 0
    rate = kept.float().mean().item()
    scaled = ((y[kept] - (x * 1.5)[kept] / 0.75).abs().max() / y.abs().max()).item()
    grad = m.w.grad if hasattr(m, "w") else next(m.parameters()).grad
    same = ((grad - (kept * x / 0.75).sum(0)).abs().max() / grad.abs().max()).item()
    other = bool(((y2 != 0) != kept).any())
    good = dynamo.STATS["fusec"] >= before + 2 and abs(rate - 0.75) < 0.03 and scaled < 1e-6 and same < 1e-5 and other
    print(f"{'ok  ' if good else 'FAIL'} dropout by fusec: kept {rate:.3f} (p 0.25), scaled within {scaled:.1e}, the "
          f"backward's mask the forward's within {same:.1e}, the next call another mask: {other}, graphs by fusec "
          f"{dynamo.STATS['fusec'] - before}")
    return good


def check_guarded_calls(device):
    """Calls after the first of a guarded graph (Dynamo's guards fix the arguments' dtypes,
    shapes and strides) take their sources as the first call planned: an argument read in
    place, a strided one copied contiguous each call. Three calls on new values, each against
    eager: a stale address or a skipped copy gives the last call's or a strided reading."""
    from fusec import dynamo

    class Weighted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.linspace(0.5, 2.0, 24, device=device))

        def forward(self, x, y):
            return (x * self.w).sum(1) + y

    torch.manual_seed(7)
    eager = Weighted()
    m = dynamo.aot_module(Weighted(), guarded=True) if not hasattr(torch, "compile") else \
        torch.compile(Weighted(), backend="fusec", dynamic=False)
    worst = 0.0
    for _ in range(3):
        x = torch.randn(24, 16, device=device).t()  # strided: the first call plans a copy
        y = torch.randn(16, device=device)
        got, want = m(x, y), eager(x, y)
        got.sum().backward()
        worst = max(worst, ((got - want).abs().max() / want.abs().max()).item())
    good = worst < 1e-6
    print(f"{'ok  ' if good else 'FAIL'} guarded calls (a strided argument, new values each call): worst relative "
          f"difference {worst:.1e}")
    return good


def check_first_call(device):
    """A graph compiles at its first call from that call's own tensors: no random stand-ins
    for its inputs (a backward's would double its saved activations at the first step's
    peak), and the compile leaves torch's random stream where eager leaves it. Fails where a
    stand-in is made (the compile refuses: graphs by PyTorch) or the stream moved."""
    from fusec import dynamo, graph_compile

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 32 * 16, device=device).reshape(32, 16))

        def forward(self, x):
            return torch.tanh(x @ self.w).sum(1)

    def step(m):
        torch.manual_seed(11)
        x = torch.randn(8, 32, device=device)
        y = m(x)
        y.sum().backward()
        return y.detach(), torch.rand(4, device=device)

    want, want_next = step(Layer())
    before = dict(dynamo.STATS)
    stand_in = graph_compile._real_like

    def refused(x):
        raise AssertionError("a random stand-in for a first call's tensor")
    graph_compile._real_like = refused
    try:
        m = dynamo.aot_module(Layer(), guarded=True) if not hasattr(torch, "compile") else \
            torch.compile(Layer(), backend="fusec", dynamic=False)
        got, got_next = step(m)
    finally:
        graph_compile._real_like = stand_in
    graphs = {k: dynamo.STATS[k] - before[k] for k in before}
    worst = ((got - want).abs().max() / want.abs().max()).item()
    same_stream = torch.equal(got_next, want_next)
    good = graphs["fusec"] == 2 and graphs["pytorch"] == 0 and worst < 1e-5 and same_stream
    print(f"{'ok  ' if good else 'FAIL'} the first call compiles from its own tensors: graphs by fusec {graphs['fusec']}, "
          f"by PyTorch {graphs['pytorch']}, worst relative difference {worst:.1e}, torch's random stream as eager's: "
          f"{same_stream}")
    return good


def check_first_call_layouts(device):
    """A first call's tensor laid out otherwise than in the trace (the GPT-2 models under bf16
    autocast: fusec's forward writes its saved activations contiguous; the backward was traced
    on another layout) still compiles: the example run reads a copy in the trace's layout,
    where the graph's views apply, and the program reads the tensor by value. Here a view that
    applies to the trace's contiguous [4, 6] and not to the call's transposed one."""
    from fusec import graph_compile
    gm = torch.fx.symbolic_trace(lambda x: torch.ops.aten.mul.Tensor(torch.ops.aten.view.default(x, [24]), 2.0))
    x = torch.randn(6, 4, device=device).t()  # [4, 6], strides (1, 4)
    try:
        compiled = graph_compile.CompiledGraph(gm, [x], real_examples=True, example_layouts=[((4, 6), (6, 1))])
        got = compiled(x)
        got = got[0] if isinstance(got, (list, tuple)) else got
        good = torch.equal(got, x.reshape(24) * 2.0)
        detail = f"the program's result {'equals' if good else 'differs from'} the graph's"
    except Exception as e:
        good, detail = False, f"{type(e).__name__}: {str(e).splitlines()[0]}"
    print(f"{'ok  ' if good else 'FAIL'} a first call's tensor in another layout than the trace's: {detail}")
    return good


def check_first_call_failures(device):
    """A graph that fails to compile at its first call is compiled once: with strict=True each
    call raises the same one-line error; without, the pair runs in PyTorch (matching eager)
    after one warning. Fails where a later call compiles again."""
    from fusec import dynamo
    from fusec.common import ExportError

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, 16, device=device))

        def forward(self, x):
            return (x * self.w).sum(1)

    made = []

    class Refusing:
        def __init__(self, *args, **kw):
            made.append(1)
            raise ExportError("unsupported planted failure")

    real = dynamo.CompiledGraph
    dynamo.CompiledGraph = Refusing
    lines, results = [], []
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            for strict in (True, False):
                del made[:]
                m = dynamo.aot_module(Scaled(), strict=strict) if not hasattr(torch, "compile") else \
                    torch.compile(Scaled(), backend=dynamo.backend(strict=strict), dynamic=False)
                x = torch.randn(4, 16, device=device)
                for _ in range(3):
                    try:
                        y = m(x)
                        y.sum().backward()
                        results.append(((y - Scaled()(x)).abs().max().item(), len(made)))
                    except Exception as e:
                        lines.append((str(e).splitlines()[0] if str(e) else type(e).__name__, len(made)))
    finally:
        dynamo.CompiledGraph = real
    strict_ok = len(lines) == 3 and all("planted failure" in line and n == 1 for line, n in lines)
    lenient_ok = len(results) == 3 and all(err < 1e-6 and n == 1 for err, n in results)
    good = strict_ok and lenient_ok
    print(f"{'ok  ' if good else 'FAIL'} a first call's failure is kept: strict raised {len(lines)} times "
          f"({lines[:1]}), compiles tried {[n for _, n in lines]}; without strict {len(results)} calls in PyTorch, "
          f"compiles tried {[n for _, n in results]}")
    return good


def check_saved_layouts(make, vocab, batch, seq):
    """Under bf16 autocast the forward saves each weight's bf16 transpose for the backward
    (t(cast(w))). It comes laid out as the trace has it: the forward writes the cast (which its
    GEMM reads anyway) into a tensor with the transpose's strides, and the backward reads it
    where it lies, no copy on either side; the step still matches eager (compare, above)."""
    from fusec import dynamo
    torch.manual_seed(0)
    model = dynamo.aot_module(make(), guarded=True)
    before = set(id(c) for c in dynamo.COMPILED)
    ids = torch.randint(0, vocab, (batch, seq))
    for _ in range(2):  # the second call runs as its first planned
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(ids).float().sum()
        loss.backward()
    graphs = [c for c in dynamo.COMPILED if id(c) not in before and c.program is not None]
    laid_out = sum(len(c._layouts) for c in graphs)
    in_place = sum(1 for c in graphs for f in c._feeds if isinstance(f, tuple) and f[1] is not None)
    copied = sum(1 for c in graphs for f in getattr(c, "_guarded_feeds", []) if f[0] == "copy")
    good = len(graphs) == 2 and laid_out > 0 and in_place >= laid_out and copied == 0
    print(f"{'ok  ' if good else 'FAIL'} saved transposes as the trace lays them out: {laid_out} written so by the "
          f"forward, {in_place} read in place by the backward, {copied} copied")
    return good


def check_shared_outputs(make, vocab, batch, seq):
    """The forward returns one saved activation once for each GEMM that reads it (the trace's
    RMSNorm output, for Q, K and V); fusec's cse makes them one value, and the forward returns
    one tensor for all, written once (fusec_output_alias), not a copy each. The step still
    matches eager (compare, above: the same models)."""
    from fusec import dynamo
    torch.manual_seed(0)
    # AOTAutograd's default partition saves the activation once per reader (min-cut, the
    # backend's own default, recomputes the norm in the backward instead).
    given = os.environ.get("FUSEC_BACKEND_PARTITION")
    os.environ["FUSEC_BACKEND_PARTITION"] = "default"
    try:
        model = dynamo.aot_module(make(), guarded=True)
        before = set(id(c) for c in dynamo.COMPILED)
        ids = torch.randint(0, vocab, (batch, seq))
        model(ids).float().sum().backward()
    finally:
        os.environ.pop("FUSEC_BACKEND_PARTITION")
        if given is not None:
            os.environ["FUSEC_BACKEND_PARTITION"] = given
    graphs = [c for c in dynamo.COMPILED if id(c) not in before and c.program is not None]
    shared = sum(c.shared_outputs for c in graphs)
    aliases = sum(1 for c in graphs for a in c.program.aliases if a >= 0)
    good = len(graphs) == 2 and shared > 0 and shared <= aliases
    print(f"{'ok  ' if good else 'FAIL'} equal saved activations are one tensor: {shared} of the forward's outputs are an "
          f"earlier one's ({aliases} equal to an earlier one)")
    return good


def compare(name, make, compile_fn, device, steps, vocab, batch, seq, autocast=False, bound=1e-4, by_fusec=True):
    """Trains `make()` eager and compiled from the same weights; by_fusec: the compiled run's
    graphs (a forward and a backward at least) must be fusec's, none PyTorch's."""
    from fusec import dynamo
    torch.manual_seed(0)
    eager = make().to(device).eval()
    compiled_src = make().to(device).eval()
    compiled_src.load_state_dict(eager.state_dict())
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, vocab, (batch, seq), generator=g).to(device),
                torch.randint(0, vocab, (batch, seq), generator=g).to(device)) for _ in range(steps)]
    want = train(eager, batches, steps, autocast)
    before = dict(dynamo.STATS)
    start = time.perf_counter()
    compiled = compile_fn(compiled_src)
    try:
        got = train(compiled, batches, steps, autocast)
    except Exception as e:  # one case's failure is reported as such, and the others still run
        line = (str(e).strip().splitlines() or [type(e).__name__])[0]
        print(f"FAIL {name}: {type(e).__name__}: {line[:300]}")
        return False
    seconds = time.perf_counter() - start
    graphs = {k: dynamo.STATS[k] - before[k] for k in before}
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, want))
    ok = worst <= bound and (not by_fusec or (graphs["fusec"] >= 2 and graphs["pytorch"] == 0))
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {steps} steps, losses {want[0]:.5f} -> {want[-1]:.5f}, worst relative "
          f"difference {worst:.2e} (bound {bound:.0e}), graphs by fusec {graphs['fusec']}, by PyTorch "
          f"{graphs['pytorch']}, {seconds:.1f} s with compile")
    if not ok:
        print("     relative differences by step: " + " ".join(f"{abs(a - b) / max(abs(b), 1e-12):.1e}"
                                                         for a, b in zip(got, want)))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--hf", action="store_true", help="also transformers' GPT-2 and Llama (CUDA)")
    ap.add_argument("--bf16", action="store_true", help="also under bf16 autocast (CUDA)")
    ap.add_argument("--only", default="", help="CUDA: only the models whose name contains this")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        skip("no CUDA device")
    import cs336_lm
    import gpt2
    import llama
    from fusec import dynamo

    ok = check_mask_values()
    ok &= check_dropout(args.device)
    ok &= check_guarded_calls(args.device)
    ok &= check_first_call(args.device)
    ok &= check_first_call_failures(args.device)
    ok &= check_first_call_layouts(args.device)
    if args.device == "cpu":
        steps = args.steps or 4
        vocab, batch, seq = 37, 2, 16
        lm = lambda: cs336_lm.TransformerLM(vocab_size=vocab, context_length=seq)  # noqa: E731
        g2 = lambda: gpt2.GPT(vocab_size=vocab, block_size=seq, n_layer=2, n_head=2, n_embd=32)  # noqa: E731
        # Llama-style grouped-query attention (4 query heads over 2 kv heads, repeat_kv): the
        # forward's attention reads the unrepeated K and V.
        gqa = lambda: llama.Transformer(vocab_size=vocab, dim=64, n_layers=2, n_heads=4, n_kv_heads=2,  # noqa: E731
                                        hidden_dim=96, max_seq_len=seq)
        for name, make in (("cs336 lm", lm), ("gpt-2 (nanoGPT)", g2), ("llama (grouped-query attention)", gqa),
                           ("a bf16 sum in f32", WideSum)):
            ok &= compare(name + " (aot_module, interpreter)", make, lambda m: dynamo.aot_module(m), "cpu", steps, vocab,
                          batch, seq)
        # bf16 autocast (the CPU's): the forward returns the weights' bf16 transposes saved for
        # the backward laid out as the trace has them (the cast, read in place by the backward)
        ok &= compare("cs336 lm, bf16 autocast (aot_module, interpreter)", lm, lambda m: dynamo.aot_module(m), "cpu",
                      steps, vocab, batch, seq, autocast=True, bound=2e-2)
        ok &= check_mask_on_real_example(vocab, batch, seq)
        ok &= check_saved_layouts(lm, vocab, batch, seq)
        ok &= check_shared_outputs(lm, vocab, batch, seq)
        # strict refuses a graph with an unmapped op in one line; without, it trains in PyTorch
        try:
            m = dynamo.aot_module(Unmapped(), strict=True)
            m(torch.zeros(2, 8, dtype=torch.long)).sum().backward()
            print("FAIL strict=True accepted a graph with cumsum")
            ok = False
        except dynamo.FusecBackendError as e:
            line = str(e)
            good = "\n" not in line and "cumsum" in line
            print(f"{'ok  ' if good else 'FAIL'} strict refuses: {line}")
            ok &= good
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ok &= compare("unmapped op (runs in PyTorch)", Unmapped, lambda m: dynamo.aot_module(m), "cpu", steps, vocab,
                          batch, seq, by_fusec=False)
        named = [str(w.message) for w in caught if "fusec backend" in str(w.message)]
        good = any("cumsum" in w for w in named)
        print(f"{'ok  ' if good else 'FAIL'} the warning names the op: {named[:1]}")
        ok &= good
        # A random draw that reads no input is not folded into a constant (it would repeat
        # every step): the graph runs in PyTorch, the warning names the op.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            before = dict(dynamo.STATS)
            torch.manual_seed(3)
            dynamo.aot_module(Noisy())(torch.zeros(2, 8, dtype=torch.long)).sum().backward()
        named = [str(w.message) for w in caught if "fusec backend" in str(w.message)]
        good = any("aten.rand" in w for w in named) and dynamo.STATS["fusec"] == before["fusec"]
        print(f"{'ok  ' if good else 'FAIL'} a random op runs in PyTorch: {named[:1]}")
        ok &= good
        sys.exit(0 if ok else 1)

    if not hasattr(torch, "compile"):
        skip(f"torch {torch.__version__} has no torch.compile")
    steps = args.steps or 20
    vocab, batch, seq = 512, 8, 128
    lm = lambda: cs336_lm.TransformerLM(vocab_size=vocab, context_length=seq, d_model=256, num_layers=4,  # noqa: E731
                                        num_heads=4, d_ff=1024)
    compile_fusec = lambda m: torch.compile(m, backend="fusec", dynamic=False)  # noqa: E731
    cases = [("cs336 lm", lm), ("cs336 lm, graph break", lambda: Breaks(lm())),
             ("gpt-2 (nanoGPT)", lambda: gpt2.GPT(vocab_size=vocab, block_size=seq, n_layer=4, n_head=4, n_embd=256))]
    if args.hf:
        try:
            import transformers
        except ImportError:
            skip("--hf: no transformers in this python3")
        cases.append(("transformers GPT-2", lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=vocab, n_positions=seq, n_embd=256, n_layer=4, n_head=4, resid_pdrop=0, embd_pdrop=0,
            attn_pdrop=0, attn_implementation="sdpa"))))
        cases.append(("transformers Llama", lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=vocab, hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=seq, attn_implementation="sdpa"))))
    for name, make in cases:
        if args.only not in name:
            continue
        wrap = (lambda mk: (lambda: _Logits(mk())))(make) if "transformers" in name else make
        torch._dynamo.reset()
        ok &= compare(name, wrap, compile_fusec, "cuda", steps, vocab, batch, seq)
        if args.bf16:
            torch._dynamo.reset()
            ok &= compare(name + ", bf16 autocast", wrap, compile_fusec, "cuda", steps, vocab, batch, seq, autocast=True,
                          bound=2e-2)
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok &= compare("unmapped op (runs in PyTorch)", lambda: Unmapped(vocab), compile_fusec, "cuda", steps, vocab, batch, seq,
                      by_fusec=False)
    named = [str(w.message) for w in caught if "fusec backend" in str(w.message)]
    good = any("cumsum" in w for w in named)
    print(f"{'ok  ' if good else 'FAIL'} the warning names the op: {named[:1]}")
    ok &= good
    torch._dynamo.reset()
    try:
        m = torch.compile(Unmapped().cuda(), backend=dynamo.backend(strict=True))
        m(torch.zeros(2, 8, dtype=torch.long, device="cuda")).sum().backward()
        print("FAIL strict=True accepted a graph with cumsum")
        ok = False
    except Exception as e:  # Dynamo wraps a backend's exception in its own
        line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        good = "cumsum" in str(e)
        print(f"{'ok  ' if good else 'FAIL'} strict refuses: {line[:200]}")
        ok &= good
    sys.exit(0 if ok else 1)


class _Logits(torch.nn.Module):
    """A transformers causal LM as forward(ids) -> logits (no cache)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, use_cache=False).logits


if __name__ == "__main__":
    main()
