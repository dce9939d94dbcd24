"""Attention under a mask that is not the causal one (each query sees itself and the two keys
before it): the exporter must recognise that this is not fusec's causal attention composite,
keep the explicit softmax, and still match PyTorch."""
import torch
import torch.nn as nn


class BandAttentionLM(nn.Module):
    def __init__(self, vocab_size=37, d=16, window=3, context_length=16):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.head = nn.Linear(d, vocab_size, bias=False)
        i = torch.arange(context_length)
        self.register_buffer("band", (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window))

    def forward(self, ids):
        T = ids.shape[1]
        q, k, v = self.qkv(self.emb(ids)).chunk(3, dim=-1)
        s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        s = s.masked_fill(~self.band[:T, :T], float("-inf"))
        return self.head(s.softmax(-1) @ v)
