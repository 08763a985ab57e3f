// Point-to-point send/recv on a Communicator (what pipeline stages exchange): two thread ranks of
// a Gloo group over an in-memory store, as c10d's own C++ tests run Gloo. Values are exact: the
// bytes cross unchanged, so every comparison is equality.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "ctitan/distributed/communicator.h"
#include "support/thread_ranks.h"

namespace ctitan::distributed {
namespace {

std::shared_ptr<Communicator> pair_group(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name,
                                         int rank) {
  return Communicator::create(store, name, rank, 2, std::chrono::seconds(30), "127.0.0.1");
}

// Both ranks send and receive at once (a pipeline's forward and backward traffic crossing), and
// the receives are posted before the sends: neither direction waits for the other.
TEST(PointToPoint, BothDirectionsAtOnceWithReceivesPostedFirst) {
  auto store = testing::in_memory_store();
  std::vector<torch::Tensor> got(2);
  auto errors = testing::on_thread_ranks(2, [&](int rank) {
    auto comm = pair_group(store, "both", rank);
    int peer = 1 - rank;
    auto in = torch::empty({3, 4});
    auto recv = comm->irecv(in, peer, /*tag=*/7);
    auto out = torch::arange(12, torch::kFloat).reshape({3, 4}) + 100 * rank;
    auto send = comm->isend(out, peer, /*tag=*/7);
    recv->wait();
    send->wait();
    got[size_t(rank)] = in;
  });
  ASSERT_EQ(testing::rank_errors(errors), "");
  EXPECT_TRUE(got[0].equal(torch::arange(12, torch::kFloat).reshape({3, 4}) + 100));
  EXPECT_TRUE(got[1].equal(torch::arange(12, torch::kFloat).reshape({3, 4})));
}

// Tags pair sends with receives, whatever the order: rank 1 posts tag 2's receive before tag 1's,
// while rank 0 sends tag 1 first. A pairing by arrival order would swap the tensors.
TEST(PointToPoint, TagsPairMessagesOutOfOrder) {
  auto store = testing::in_memory_store();
  torch::Tensor first, second;
  auto errors = testing::on_thread_ranks(2, [&](int rank) {
    auto comm = pair_group(store, "tags", rank);
    if (rank == 0) {
      auto a = comm->isend(torch::full({5}, 1.0), 1, 1);
      auto b = comm->isend(torch::full({5}, 2.0), 1, 2);
      a->wait();
      b->wait();
      return;
    }
    second = torch::empty({5});
    first = torch::empty({5});
    auto r2 = comm->irecv(second, 0, 2);
    auto r1 = comm->irecv(first, 0, 1);
    r2->wait();
    r1->wait();
  });
  ASSERT_EQ(testing::rank_errors(errors), "");
  EXPECT_TRUE(first.equal(torch::full({5}, 1.0)));
  EXPECT_TRUE(second.equal(torch::full({5}, 2.0)));
}

// A receive posted after its send arrived still gets it; bf16 crosses as raw bits (NaN payloads,
// denormals and all), and wait() leaves the caller the only owner of its buffers.
TEST(PointToPoint, Bf16BitExactAndBuffersReleasedAtWait) {
  auto store = testing::in_memory_store();
  auto sent = torch::randn({64}, torch::kFloat).to(torch::kBFloat16);
  sent[0] = std::nanf("");
  torch::Tensor received;
  long send_use_count = 0, recv_use_count = 0;
  auto errors = testing::on_thread_ranks(2, [&](int rank) {
    auto comm = pair_group(store, "bf16", rank);
    if (rank == 0) {
      auto t = sent.clone();
      auto work = comm->isend(t, 1, 0);
      work->wait();
      send_use_count = t.use_count();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the send is already waiting
    received = torch::empty({64}, torch::kBFloat16);
    auto work = comm->irecv(received, 0, 0);
    work->wait();
    work->wait();  // a second wait() is a no-op
    EXPECT_TRUE(work->is_completed());
    recv_use_count = received.use_count();
  });
  ASSERT_EQ(testing::rank_errors(errors), "");
  EXPECT_TRUE(received.view(torch::kInt16).equal(sent.view(torch::kInt16)));
  EXPECT_EQ(send_use_count, 1);
  EXPECT_EQ(recv_use_count, 1);
}

TEST(PointToPoint, RefusesBadArgumentsWithOneLine) {
  auto store = testing::in_memory_store();
  auto errors = testing::on_thread_ranks(2, [&](int rank) {
    auto comm = pair_group(store, "args", rank);
    auto expect_refusal = [](const std::function<void()>& call, const std::string& text) {
      try {
        call();
        ADD_FAILURE() << "no error, expected: " << text;
      } catch (const CommError& e) {
        EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      }
    };
    auto strided = torch::zeros({4, 4}).t();
    expect_refusal([&] { comm->isend(strided, 1 - rank, 0); }, "needs a contiguous, non-empty tensor");
    expect_refusal([&] { comm->irecv(torch::zeros({0}), 1 - rank, 0); }, "needs a contiguous, non-empty tensor");
    expect_refusal([&] { comm->isend(torch::zeros({2}), rank, 0); }, "is not another rank of group 'args'");
    expect_refusal([&] { comm->isend(torch::zeros({2}), 2, 0); }, "peer 2 is not another rank");
    expect_refusal([&] { comm->irecv(torch::zeros({2}), 1 - rank, -1); }, "tag -1 on group 'args' is negative");
    // Nothing above crossed the wire, so without this a rank could close its end while the other
    // was still finishing Gloo's connection handshake, which fails that rank's group creation.
    comm->barrier();
  });
  EXPECT_EQ(testing::rank_errors(errors), "");
}

// A receive nobody sends times out from wait(), naming peer and tag; the group is then failed, so
// the next collective is refused at once instead of hanging on a peer whose plan diverged.
TEST(PointToPoint, UnmatchedReceiveTimesOutAndFailsTheGroup) {
  auto store = testing::in_memory_store();
  std::string timeout_error, next_error;
  std::atomic<bool> finished{false};
  auto errors = testing::on_thread_ranks(2, [&](int rank) {
    auto comm = Communicator::create(store, "lost", rank, 2, std::chrono::seconds(30), "127.0.0.1");
    if (rank == 0) {  // alive but silent: a closed connection would be another error
      while (!finished) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    comm->set_timeout(std::chrono::seconds(1));
    auto buffer = torch::empty({8});
    auto work = comm->irecv(buffer, 0, 42);
    try {
      work->wait();
    } catch (const CommError& e) {
      timeout_error = e.what();
    }
    try {
      auto t = torch::ones({1});
      comm->all_reduce(t, ReduceOp::kSum);
    } catch (const CommError& e) {
      next_error = e.what();
    }
    finished = true;
  });
  EXPECT_EQ(testing::rank_errors(errors), "");
  EXPECT_NE(timeout_error.find("collective timeout: recv #1 from rank 0 (tag 42) on group 'lost' (rank 1 of 2, 8 x "),
            std::string::npos)
      << timeout_error;
  EXPECT_NE(next_error.find("all_reduce on group 'lost' refused: the group failed earlier"), std::string::npos)
      << next_error;
}

}  // namespace
}  // namespace ctitan::distributed
