#pragma once
// The device a rank computes on, chosen once per process before any CUDA or NCCL call: a rank
// started by a launcher with LOCAL_RANK = k uses cuda:k, as torchrun's users expect (one process
// per GPU; the launcher sets no CUDA_VISIBLE_DEVICES). NCCL process groups are created only in a
// process whose device is a GPU, so a CPU run on a GPU machine stays on Gloo.
#include <c10/core/Device.h>

#include "ctitan/config/job_config.h"

namespace ctitan::distributed {

// The device for `choice` on local rank `local_rank` when `cuda_devices` GPUs are visible. A launcher
// that gives each process its own GPU (CUDA_VISIBLE_DEVICES naming one device, as Slurm's
// --gpus-per-task=1 does: `own_gpu_given`) leaves one visible, cuda:0, whatever the local rank.
// Pure: throws ConfigError (training.device, LOCAL_RANK and the count named) when cuda is asked for
// and none is visible, or when the local rank has no GPU of its own (two ranks cannot share a GPU
// under NCCL).
c10::Device device_for_rank(config::DeviceChoice choice, int local_rank, int cuda_devices, bool own_gpu_given = false);

// device_for_rank() with this machine's visible GPU count, made the process's device: the current
// CUDA device when it is a GPU. Call once per process, before building a model or a process group.
c10::Device use_rank_device(config::DeviceChoice choice, int local_rank);

// The device use_rank_device() chose; the CPU before it was called.
c10::Device process_device();

}  // namespace ctitan::distributed
