#pragma once
// The launcher's signal handling: SIGINT, SIGTERM, SIGHUP, SIGQUIT (to forward to the workers)
// and SIGCHLD (a worker ended) are turned into bytes on a pipe, which the supervisor polls
// together with the workers' output. SIGPIPE is ignored: a closed console must not kill the
// launcher, and with it (PR_SET_PDEATHSIG) every worker. One instance at a time per process.
namespace ctitan::launcher {

class SignalPipe {
 public:
  SignalPipe();   // installs the handlers
  ~SignalPipe();  // restores the previous ones
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int fd() const;  // readable when a signal arrived
  // Consumes what arrived. Returns the first terminating signal (not SIGCHLD) ever received,
  // or 0; `count()` is how many terminating signals have arrived so far.
  int poll_signal();
  int count() const { return count_; }

 private:
  int first_ = 0;
  int count_ = 0;
};

}  // namespace ctitan::launcher
