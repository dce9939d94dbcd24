"""The tensors a compiled graph's call writes, allocated as few blocks instead of one tensor
each: a forward saves hundreds of tensors for its backward, and a backward returns one
gradient a parameter, so one `torch.empty` per output (and one `data_ptr` each) cost the
step more time on the CPU than fusec's whole CUDA graph launch. Outputs of one dtype that
die together (saved tensors, gradients) share one block, each at a 256-byte boundary (the
alignment fusec's runtime writes in place); the others get tensors of their own."""
import torch

ALIGN = 256  # bytes: api/c_api.h writes an output in place only at this alignment


class OutputBlocks:
    """outputs: [(dtype, shape)] as the program writes them; own: the indices that get a
    tensor of their own (what the caller may keep after the others are freed)."""

    def __init__(self, outputs, own, device):
        self.device = torch.device(device)
        self.count = len(outputs)
        self.own = [(i, dtype, shape) for i, (dtype, shape) in enumerate(outputs) if i in own]
        by_dtype = {}
        for i, (dtype, _) in enumerate(outputs):
            if i not in own:
                by_dtype.setdefault(dtype, []).append(i)
        self.groups = []  # (dtype, elements, alignment in elements, split sizes, [(output index, shape, byte offset)])
        for dtype, indices in by_dtype.items():
            size = torch.empty(0, dtype=dtype).element_size()
            step = max(ALIGN // size, 1)
            sizes, members, at = [], [], 0
            for i in indices:
                shape = outputs[i][1]
                n = 1
                for d in shape:
                    n *= d
                padded = -(-max(n, 1) // step) * step
                sizes += [n, padded - n]  # the output, then the padding to the next boundary
                members.append((i, shape, at * size))
                at += padded
            self.groups.append((dtype, at, step, sizes, members))

    def __call__(self):
        """A fresh set of outputs: (tensors, their device addresses), in output order."""
        outs, ptrs = [None] * self.count, [0] * self.count
        for dtype, elements, step, sizes, members in self.groups:
            # One step more than needed: the block's first boundary may come after its start
            # (CUDA's allocator aligns further; the CPU's does not).
            block = torch.empty(elements + step, dtype=dtype, device=self.device)
            size = block.element_size()
            shift = (-block.data_ptr() % ALIGN) // size
            parts, base = block.split([shift] + sizes + [step - shift]), block.data_ptr() + shift * size
            for j, (i, shape, offset) in enumerate(members):
                outs[i] = parts[2 * j + 1].view(shape)
                ptrs[i] = base + offset
        for i, dtype, shape in self.own:
            t = torch.empty(shape, dtype=dtype, device=self.device)
            outs[i], ptrs[i] = t, t.data_ptr()
        return outs, ptrs
