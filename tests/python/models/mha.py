"""A language model built on torch.nn.MultiheadAttention (batch_first, self-attention under a
causal attn_mask, need_weights=False), as a PyTorch user writes one without a hand-rolled
attention: learned positions from arange, pre-LayerNorm blocks, a GELU MLP, an untied head.
Its causal masks are registered buffers, one kind per block in turn: block 0's a float mask
(-inf above the diagonal) registered with persistent=False, so state_dict() leaves it out;
block 1's a bool mask (True above the diagonal), persistent, so state_dict() holds it. The
exporter's test model for nn.MultiheadAttention (on torch 1.13 its scores are one
aten.baddbmm: the mask plus Q K^T) and for weights.safetensors loading back with
load_state_dict(strict=True); nothing here knows about fusec."""
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d_model, n_head, context_length, persistent_mask):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_head, batch_first=True)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        above = torch.ones(context_length, context_length, dtype=torch.bool).triu(1)
        if persistent_mask:
            self.register_buffer("mask", above)
        else:
            self.register_buffer("mask", torch.zeros(context_length, context_length).masked_fill(above, float("-inf")),
                                 persistent=False)

    def forward(self, x):
        T = x.shape[1]
        h = self.ln_1(x)
        a, _ = self.attn(h, h, h, attn_mask=self.mask[:T, :T], need_weights=False)
        x = x + a
        return x + self.mlp(self.ln_2(x))


class MultiheadAttentionLM(nn.Module):
    def __init__(self, vocab_size=37, context_length=16, d_model=32, n_head=4, n_layer=2):
        super().__init__()
        self.context_length = context_length
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(context_length, d_model)
        self.blocks = nn.ModuleList([Block(d_model, n_head, context_length, persistent_mask=i % 2 == 1)
                                     for i in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, ids):
        T = ids.shape[1]
        assert T <= self.context_length
        x = self.wte(ids) + self.wpe(torch.arange(T, device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))
