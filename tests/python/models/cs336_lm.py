"""A CS336-style TransformerLM written the usual PyTorch way (its own module structure and
names, einsum attention, RoPE from cached tables, RMSNorm, SwiGLU): the exporter's test model
(a). Nothing here knows about fusec."""
import math

import torch
import torch.nn as nn


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, heads, context_length, theta=10000.0):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        dh = d_model // heads
        inv = theta ** (-torch.arange(0, dh, 2).float() / dh)
        angles = torch.arange(context_length).float()[:, None] * inv[None, :]
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def rope(self, t, T):
        even, odd = t[..., 0::2], t[..., 1::2]
        c, s = self.cos[:T], self.sin[:T]
        return torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=-1)
        q, k, v = [t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v)]
        q, k = self.rope(q, T), self.rope(k, T)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        probs = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
        return self.out((probs @ v).transpose(1, 2).reshape(B, T, D))


class SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)

    def forward(self, x):
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, d_model, heads, d_ff, context_length):
        super().__init__()
        self.ln1 = RMSNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads, context_length)
        self.ln2 = RMSNorm(d_model)
        self.ffn = SwiGLU(d_model, d_ff)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    def __init__(self, vocab_size=37, context_length=16, d_model=32, num_layers=2, num_heads=2, d_ff=64):
        super().__init__()
        self.token_embeddings = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(Block(d_model, num_heads, d_ff, context_length) for _ in range(num_layers))
        self.ln_final = RMSNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, ids):
        x = self.token_embeddings(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.ln_final(x))
