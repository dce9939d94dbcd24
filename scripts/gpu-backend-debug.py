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
for device in ["cuda"] if torch.cuda.is_available() else ["cpu"]:
    m = model.to(device)
    want = m(ids.to(device)).double()
    for k, options in enumerate(os.environ.get("DEBUG_OPTIONS", ";zero_copy=0;zero_copy=inputs;zero_copy=outputs").split(";")):
        opts = f"dump={out}/{device}{k}.fir" + ("," + options if options else "")
        compiled = dynamo.aot_module(m, options=opts)
        got = compiled(ids.to(device)).double()
        err = ((got - want).norm() / want.norm()).item()
        print(f"{device} options '{options}': logits relative error {err:.3e}, max abs {(got - want).abs().max().item():.3e}")

# Every output of the forward graph, zero-copy against copied, on the same arguments: which differ.
if torch.cuda.is_available():
    from fusec import graph_compile
    captured = {}
    original = graph_compile.CompiledGraph.__call__

    def recording(self, *args):
        captured.setdefault("args", [a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        captured.setdefault("self", self)
        return original(self, *args)

    graph_compile.CompiledGraph.__call__ = recording
    gms = []
    orig_init = graph_compile.CompiledGraph.__init__

    def init(self, gm, example_inputs, options=""):
        gms.append((gm, example_inputs))
        orig_init(self, gm, example_inputs, options)

    graph_compile.CompiledGraph.__init__ = init
    m = model.to("cuda")
    dynamo.aot_module(m, options="zero_copy=0")(ids.to("cuda"))
    graph_compile.CompiledGraph.__call__ = original
    gm, ex = gms[0]
    args = captured["args"]
    ref = graph_compile.CompiledGraph(gm, ex, "zero_copy=0")
    test = graph_compile.CompiledGraph(gm, ex, f"dump={out}/test.fir")
    want, got = ref(*args), test(*args)
    torch.cuda.synchronize()
    bad = 0
    for i, (w, g) in enumerate(zip(want, got)):
        if isinstance(w, torch.Tensor) and not torch.equal(w, g):
            bad += 1
            if bad <= 12:
                kind = test.plan[i]
                print(f"output {i} {tuple(w.shape)} {w.dtype} plan {kind[:2]}: max abs diff {(w.double() - g.double()).abs().max().item():.3e}")
    print(f"{bad} of {len(want)} outputs differ")
    print("fusec outputs:", [(k, t) for k, t in enumerate(test.program.outputs)][:5])
