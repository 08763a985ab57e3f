#pragma once
// SIGTERM as a request to stop at the next step boundary, and the test-only fault injections.
#include <cstdint>

namespace ctitan::checkpoint {

// Installs a SIGTERM handler that only records the signal; the previous handler is restored by
// uninstall. Only one installation at a time.
void install_sigterm_handler();
void uninstall_sigterm_handler();
bool sigterm_received();
void clear_sigterm();

// Test-only fault injection, honoured only in launcher round 0 (TORCHELASTIC_RESTART_COUNT unset
// or 0) and only on rank CTITAN_FAULT_RANK (default 0), after step `step` completed:
//   CTITAN_FAULT_KILL_AT_STEP=N     raise(SIGKILL): a crash with no chance to save
//   CTITAN_FAULT_SIGTERM_AT_STEP=N  raise(SIGTERM): as if the scheduler preempted this rank
//   CTITAN_FAULT_STALL_AT_STEP=N    raise(SIGSTOP): a rank that stops answering (a hung host)
void inject_faults_after_step(int64_t step, int rank);
// The same rules, at the start of the checkpoint save of step `step`, before the ranks exchange
// their plans:
//   CTITAN_FAULT_STALL_IN_SAVE_AT_STEP=N  raise(SIGSTOP): a rank that stops answering mid-save
void inject_fault_in_save(int64_t step, int rank);
// The same rules, once set-up is done (the checkpoint loaded), before step 1:
//   CTITAN_FAULT_SIGTERM_IN_SETUP=1  raise(SIGTERM): a preemption that arrives while the job loads
void inject_fault_in_setup(int rank);

}  // namespace ctitan::checkpoint
