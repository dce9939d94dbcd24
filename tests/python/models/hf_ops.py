"""What Hugging Face families need beyond the plain LMs' ops (issue 42), in one small model:
  - an embedding with a padding_idx (OPT, Gemma, OLMo: nn.Embedding(vocab, d, pad_token_id)):
    the pad token's row gets no gradient;
  - a LayerNorm without affine (OLMo's) and one with a weight and no bias;
  - aten.index.Tensor with one index tensor: a table indexed by the ids (dynamic indices, its
    rows' gradients summed where an id repeats), and the positions reordered by a static
    index whose entries are negative (they count from the end, as in torch);
  - an empty slice concatenated back (Phi-3's rotary embedding over the whole head)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class PadNormIndexLM(nn.Module):
    def __init__(self, vocab_size=7, d_model=16, context_length=12, pad_token_id=1):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model, padding_idx=pad_token_id)
        self.table = nn.Parameter(0.5 * torch.randn(vocab_size, d_model))
        self.proj = nn.Linear(d_model, d_model)
        self.norm_weight = nn.Parameter(1 + 0.1 * torch.randn(d_model))
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        # -1, -2, ..., -context_length: the positions reversed, written from the end
        self.register_buffer("order", -1 - torch.arange(context_length), persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        h = self.emb(ids) + self.table[ids]
        h = F.layer_norm(h, (h.shape[-1],))
        h = h + self.proj(h)[:, self.order[-t:]]
        h = F.layer_norm(h, (h.shape[-1],), self.norm_weight, None)
        # Phi-3's rotary embedding over the whole head: its pass-through part is an empty slice,
        # concatenated back (fusec has no empty tensors: the concatenation leaves it out)
        d = h.shape[-1]
        h = torch.cat([h[..., :d] * 1.5, h[..., d:]], dim=-1)
        return self.head(h)
