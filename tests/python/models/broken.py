"""Models whose export must fail with one line and exit 1, nothing written (export_test.py's
failures()): each breaks in its own way, in its own code."""
import sys

import torch.nn as nn


class RaisesInInit(nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("d_model must be even")


class ExitsInInit(nn.Module):
    def __init__(self):
        super().__init__()
        sys.exit(3)


class ForwardNeedsTargets(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8)

    def forward(self, ids, targets):
        return self.emb(ids)
