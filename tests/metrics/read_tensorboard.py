"""Reads every scalar of a TensorBoard log directory with the tensorboard package's own event
reader (EventAccumulator), the independent reference for ctitan's event writer.

usage: read_tensorboard.py LOG_DIR OUT_JSON  ->  {"tag": [[step, value], ...], ...}
"""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator


def main():
    log_dir, out_path = sys.argv[1], sys.argv[2]
    acc = event_accumulator.EventAccumulator(log_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    scalars = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    with open(out_path, "w") as f:
        json.dump(scalars, f)


if __name__ == "__main__":
    main()
