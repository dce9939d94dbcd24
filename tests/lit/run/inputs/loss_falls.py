"""Reads `fusec run` training output ("step k/N  loss X" lines) and fails unless the mean loss of
the last 10 steps is below FRACTION of the first step's. Prints the losses it read."""
import sys

losses = [float(line.split()[-1]) for line in open(sys.argv[1]) if line.startswith("step ")]
fraction = float(sys.argv[2])
last = sum(losses[-10:]) / len(losses[-10:])
print(f"steps {len(losses)}: first loss {losses[0]:.4f}, mean of the last 10 {last:.4f}")
sys.exit(0 if len(losses) >= 20 and last < fraction * losses[0] else 1)
