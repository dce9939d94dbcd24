"""An LM with dropout where models put it (tests/python/export_test.py's dropout check): on the
embeddings, on the attention weights (nanoGPT's explicit attention, so the dropout sits between
the softmax and the product with V) and on each residual branch."""
import math

import torch
import torch.nn.functional as F


class DropoutLM(torch.nn.Module):
    def __init__(self, vocab=37, d=16, heads=2, ctx=16, p=0.1):
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Embedding(vocab, d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.mlp = torch.nn.Linear(d, d)
        self.head = torch.nn.Linear(d, vocab)
        self.drop, self.attn_drop = torch.nn.Dropout(p), torch.nn.Dropout(p)
        self.register_buffer("mask", torch.tril(torch.ones(ctx, ctx)).view(1, 1, ctx, ctx), persistent=False)

    def forward(self, ids):
        b, t = ids.shape
        x = self.drop(self.embed(ids))
        q, k, v = self.qkv(x).split(x.shape[-1], dim=2)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.shape[-1]))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, -1)
        x = x + self.drop(self.proj(y))
        x = x + self.drop(torch.tanh(self.mlp(x)))
        return self.head(x)
