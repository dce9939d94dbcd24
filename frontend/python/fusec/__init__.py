"""fusec's Python side: the PyTorch exporter (fusec.export) and the safetensors writer it uses."""
