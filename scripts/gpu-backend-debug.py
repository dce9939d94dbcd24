"""Debugging the torch.compile backend on a GPU (scripts/gpu-backend.sh's test failed): one
forward of a test model with grad on, eager against fusec's forward graph on the GPU and on the
CPU interpreter (same weights, same ids), for each FUSEC_BACKEND_OPTIONS pipeline given; the
lowered IR is dumped to $OUT/<name>.fir."""
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "frontend", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python", "models"))
import cs336_lm  # noqa: E402
from fusec import dynamo  # noqa: E402

out = os.environ.get("OUT", "/tmp")
vocab, seq = 512, 128
torch.manual_seed(0)
model = cs336_lm.TransformerLM(vocab_size=vocab, context_length=seq, d_model=256, num_layers=4, num_heads=4, d_ff=1024)
ids = torch.randint(0, vocab, (8, seq))
for device in (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]:
    m = model.to(device)
    want = m(ids.to(device)).double()
    for k, options in enumerate(["", "passes=decompose-keep-attention,canonicalize,cse,dce,fuse,schedule,memory-plan"]):
        opts = f"dump={out}/{device}{k}.fir" + ("," + options if options else "")
        compiled = dynamo.aot_module(m, options=opts)
        got = compiled(ids.to(device)).double()
        err = ((got - want).norm() / want.norm()).item()
        print(f"{device} options '{options}': logits relative error {err:.3e}, max abs {(got - want).abs().max().item():.3e}")
