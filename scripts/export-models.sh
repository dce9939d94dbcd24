# The test models the GPU scripts export at GPT-2 small size (d 768, 12 layers, ctx 1024):
# SPEC, the exporter's --model; KWARGS, its --kwargs. Sourced by gpu-export-bench.sh and
# gpu-imported-step.sh.
# shellcheck disable=SC2034  # read by the scripts that source this
declare -A SPEC=(
  [gpt2]="tests/python/models/gpt2.py:GPT"
  [llama]="tests/python/models/llama.py:Transformer"
  [cs336]="tests/python/models/cs336_lm.py:TransformerLM"
)
declare -A KWARGS=(
  [gpt2]='{"vocab_size": 50304, "block_size": 1024, "n_layer": 12, "n_head": 12, "n_embd": 768}'
  [llama]='{"vocab_size": 32000, "dim": 768, "n_layers": 12, "n_heads": 12, "n_kv_heads": 4, "hidden_dim": 2048, "max_seq_len": 1024}'
  [cs336]='{"vocab_size": 10000, "context_length": 1024, "d_model": 768, "num_layers": 12, "num_heads": 12, "d_ff": 2048}'
)
