// The stream watchdog without a GPU: c10d works whose completion the test controls stand for NCCL
// works (Completion::kStream), and a recorded "event" for the device after wait().
#include "ctitan/distributed/stream_watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace ctitan::distributed {
namespace {

using namespace std::chrono_literals;

// A c10d work that completes when the test says so, as an NCCL work on a stalled peer never does.
class ControlledWork : public c10d::Work {
 public:
  bool isCompleted() override { return completed; }
  std::atomic<bool> completed{false};
};

std::shared_ptr<detail::WorkState> stream_state(c10::intrusive_ptr<c10d::Work> work, std::chrono::milliseconds timeout) {
  auto s = std::make_shared<detail::WorkState>();
  s->label = "all_reduce #7 on group 'dp' (rank 0 of 2, 1024 x float)";
  s->timeout = timeout;
  s->deadline = std::chrono::steady_clock::now() + timeout;
  s->health = std::make_shared<GroupHealth>();
  s->missing_peers = [] { return std::string("not issued by rank 1 (up to #6)"); };
  s->completion = Completion::kStream;
  s->backends.push_back(std::move(work));
  return s;
}

struct Reports {
  std::mutex mutex;
  std::vector<std::string> lines;
  void add(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex);
    lines.push_back(line);
  }
  std::vector<std::string> seen() {
    std::lock_guard<std::mutex> lock(mutex);
    return lines;
  }
};

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit = 3000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (condition()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return condition();
}

// A collective whose peer never joins: one line naming it and the peer that had not issued it, as
// a CPU collective's timeout says, soon after the deadline; the group is marked failed.
TEST(StreamWatchdog, ACollectiveThatNeverCompletesIsNamedAfterItsDeadline) {
  Reports reports;
  StreamWatchdog watchdog([&](const std::string& line) { reports.add(line); }, 10ms);
  auto work = c10::make_intrusive<ControlledWork>();
  auto state = stream_state(work, 200ms);
  const auto start = std::chrono::steady_clock::now();
  watchdog.watch(state);
  ASSERT_TRUE(eventually([&] { return !reports.seen().empty(); }));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 200ms);
  EXPECT_EQ(reports.seen().at(0),
            "collective timeout: all_reduce #7 on group 'dp' (rank 0 of 2, 1024 x float) did not complete within "
            "0.2s; not issued by rank 1 (up to #6)");
  EXPECT_TRUE(state->health->failed());
  EXPECT_TRUE(eventually([&] { return watchdog.watched() == 0; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(reports.seen().size(), 1u);  // reported once
}

TEST(StreamWatchdog, ACompletedCollectiveIsDroppedAndNeverReported) {
  Reports reports;
  StreamWatchdog watchdog([&](const std::string& line) { reports.add(line); }, 10ms);
  auto work = c10::make_intrusive<ControlledWork>();
  auto state = stream_state(work, 100ms);
  watchdog.watch(state);
  work->completed = true;
  EXPECT_TRUE(eventually([&] { return watchdog.watched() == 0; }));
  std::this_thread::sleep_for(200ms);  // past the deadline
  EXPECT_TRUE(reports.seen().empty());
  EXPECT_FALSE(state->health->failed());
}

// After wait() the c10d works are released (they hold the tensors) and the watchdog follows the
// event recorded on the waiting stream: the deadline still holds until the device gets there.
TEST(StreamWatchdog, AfterWaitTheRecordedEventDecides) {
  Reports reports;
  StreamWatchdog watchdog([&](const std::string& line) { reports.add(line); }, 10ms);
  std::atomic<bool> device_passed{false};
  auto done_state = stream_state(c10::make_intrusive<ControlledWork>(), 5000ms);
  auto stalled_state = stream_state(c10::make_intrusive<ControlledWork>(), 150ms);
  for (auto* s : {&done_state, &stalled_state}) {
    (*s)->backends.clear();  // what Work::wait() does on a stream
  }
  done_state->device_done = [&] { return device_passed.load(); };
  stalled_state->device_done = [] { return false; };
  watchdog.watch(done_state);
  watchdog.watch(stalled_state);
  ASSERT_TRUE(eventually([&] { return reports.seen().size() == 1; }));
  EXPECT_NE(reports.seen()[0].find("did not complete within 0.15s"), std::string::npos) << reports.seen()[0];
  EXPECT_EQ(watchdog.watched(), 1u);  // the other one is still on its way
  device_passed = true;
  EXPECT_TRUE(eventually([&] { return watchdog.watched() == 0; }));
  EXPECT_EQ(reports.seen().size(), 1u);
}

}  // namespace
}  // namespace ctitan::distributed
