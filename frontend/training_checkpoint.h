// A training run's checkpoint: what `fusec run --resume DIR` needs to go on as if the run
// had never stopped, in one safetensors file, DIR/checkpoint.safetensors, written atomically
// (a run killed while writing it leaves the previous checkpoint whole):
//   - the program's trained state: every weight and AdamW moment, by its param name (the
//     bf16 weight copies are not kept: they are bf16 of their weight, rebuilt exactly by
//     bindProgramState);
//   - `loss`, f32[steps]: the loss of every step so far, so that the resumed run's output
//     holds the whole run's;
//   - in the metadata: the number of steps done (AdamW's step counter goes on from it), the
//     --data sampler's random-number state (the data position), and what identifies the run
//     (model and configuration, dtype, batch, inputs, seed, AdamW settings): a resume under
//     other flags would not continue the same run, so it is refused with one line.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ir/host_tensor.h"

namespace fusec {

// What makes two runs the same run: flag name -> value ("--dtype" -> "bf16").
using RunIdentity = std::map<std::string, std::string>;

struct TrainingCheckpoint {
  int64_t step = 0;             // steps completed; the next is step + 1
  std::vector<float> losses;    // one per completed step
  Bindings state;               // weights and AdamW moments, f32
  RunIdentity run;
  std::string dataState;        // the --data sampler's std::mt19937_64 state as text; "" when none
};

// DIR/checkpoint.safetensors.
std::string checkpointPath(const std::string& dir);

// Creates DIR when missing and replaces its checkpoint atomically. Error (one line) when DIR
// cannot be created or written. `c` is consumed (a large model's state is not copied again).
// Temporaries that killed writers left in DIR (".checkpoint.safetensors.tmp.PID.N", PID no
// longer running) are removed first: a run preempted again and again would pile them up.
void saveCheckpoint(const std::string& dir, TrainingCheckpoint c);

// Creates DIR when missing and proves it writable, before a run spends its time training;
// Error "--checkpoint DIR: ..." otherwise.
void requireCheckpointDir(const std::string& dir);

// Holds DIR for one run: two runs writing checkpoints into one directory would overwrite each
// other's. An flock on DIR/.fusec-lock, released when the object (or the process) ends.
class CheckpointDirLock {
 public:
  // Error "--checkpoint DIR: another fusec run is writing checkpoints there" when held.
  explicit CheckpointDirLock(const std::string& dir);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

 private:
  int fd_ = -1;
};

// Error (one line, naming the file) when DIR holds no checkpoint, or one that is corrupt,
// truncated (the safetensors reader's checks), not a fusec checkpoint, or inconsistent (a
// loss count other than its step count).
TrainingCheckpoint loadCheckpoint(const std::string& dir);
// The same checks on a checkpoint file's bytes (`path` names it in errors): what the checkpoint
// fuzzer and the byte-flip test drive, without a file per try.
TrainingCheckpoint parseCheckpoint(std::string_view bytes, const std::string& path);

// Error "--resume DIR: the checkpoint's run had --dtype bf16, this run has fp32 (a resumed
// run takes the flags of the run it continues)" for the first flag that differs.
void requireSameRun(const TrainingCheckpoint& c, const RunIdentity& run, const std::string& dir);

}  // namespace fusec
