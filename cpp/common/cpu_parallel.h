// Runs independent work items on XLA's CPU thread pool (the caller thread
// works too) and returns when every item is done. Items must not share
// outputs: each one's result is then the same whatever thread ran it, so
// kernels stay deterministic. An item that throws (std::bad_alloc, say)
// stops the items not yet started; the first exception is rethrown on the
// calling thread once no thread touches the items any more (the handlers turn
// it into an ffi::Error with RunCatching, common/ffi_util.h).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

#include "common/ffi_util.h"

namespace jaxdnn {

// Works without a pool (pool == nullptr or no threads): then serially.
inline void ParallelFor(ffi::ThreadPool* pool, int64_t n, const std::function<void(int64_t)>& item) {
  const int64_t helpers = pool ? std::min<int64_t>(pool->num_threads(), n - 1) : 0;
  if (helpers <= 0) {
    for (int64_t i = 0; i < n; ++i) item(i);
    return;
  }
  // Shared with the scheduled tasks, which may start after this returns (a
  // busy pool): they then find no item left and touch nothing else.
  struct State {
    std::atomic<int64_t> next{0}, done{0};
    std::atomic<bool> failed{false};
    int64_t n = 0;
    std::mutex mu;
    std::condition_variable cv;
    std::exception_ptr error;  // the first item's exception, under mu
  };
  auto state = std::make_shared<State>();
  state->n = n;
  const std::function<void(int64_t)>* work = &item;
  auto drain = [state, work] {
    int64_t finished = 0;
    for (int64_t i; (i = state->next.fetch_add(1)) < state->n; ++finished) {
      if (state->failed.load()) continue;  // counted as done, not run
      try {
        (*work)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(state->mu);
        if (!state->error) state->error = std::current_exception();
        state->failed = true;
      }
    }
    if (finished && state->done.fetch_add(finished) + finished == state->n) {
      std::lock_guard<std::mutex> lock(state->mu);
      state->cv.notify_all();
    }
  };
  for (int64_t t = 0; t < helpers; ++t) pool->Schedule([drain] { drain(); });
  drain();
  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait(lock, [&] { return state->done.load() == n; });
  if (state->error) std::rethrow_exception(state->error);
}

}  // namespace jaxdnn
