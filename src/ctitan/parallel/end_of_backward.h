#pragma once
// The end of a backward pass, for data parallelism's final callbacks, seen through activation
// checkpointing's nested backwards.
#include <functional>

namespace ctitan::parallel {

// Runs `callback` when the backward pass in progress ends, as the autograd engine's
// queue_callback, except inside a checkpoint's recomputation: its nested backward is a pass of
// its own, which ends after the block, so the callback waits for the backward that runs the
// checkpoint. DDP's and FSDP's end-of-backward work queues through here: on a pipeline stage
// without the output layer the first gradient that fires is inside the last block's
// recomputation, and the engine's callback would have reduced the gradients before the other
// blocks had theirs.
void queue_end_of_backward(std::function<void()> callback);

// While one lives, this thread is inside a checkpoint's nested backward; on exit, back in the
// backward that runs the checkpoint, the callbacks queued meanwhile are queued there.
class NestedBackward {
 public:
  NestedBackward();
  ~NestedBackward();
  NestedBackward(const NestedBackward&) = delete;
  NestedBackward& operator=(const NestedBackward&) = delete;
};

}  // namespace ctitan::parallel
