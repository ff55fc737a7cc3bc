// The buffer protocol of the warp-specialised fused launch (kernels/focus/focus_hard_ws.cu, its
// ring functions in focus_hard_ws_ring.h) replayed on the CPU: the producer and the consumers as
// the kernel orders their waits, loads, reads and releases, on a model of the mbarriers (a phase
// completes when its expected arrivals have come; a wait names a phase by its parity only), with
// copies that land after random delays and agents scheduled in random order. Checked: nothing
// waits forever, no wait is two phases behind its barrier (the parity would then name the wrong
// phase), and every read finds its own tile or item in the buffer, landed and not yet rewritten.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/focus/focus_hard_ws_ring.h"

namespace attnlab {
namespace {

using focus_hard_ws::empty_parity;
using focus_hard_ws::full_parity;
using focus_hard_ws::ring_buffer;

// An mbarrier: `completed` phases so far; a phase completes at `expected` arrivals.
struct Barrier {
  int expected = 1, arrivals = 0, completed = 0;
  void arrive() {
    if (++arrivals == expected) {
      arrivals = 0;
      ++completed;
    }
  }
  // A wait for the phase of this parity: done when the last completed phase has it (a fresh
  // barrier's "phase before the first" has parity 1).
  bool done(uint32_t parity) const { return uint32_t((completed - 1) & 1) == parity; }
};

// A buffer's content: the tile (or item) last loaded into it and whether its copies landed.
struct Buffer {
  int tag = -1;
  bool landed = false;
};

// One item of the block: its tiles, and per consumer whether it has rows (a consumer without
// rows only releases the buffers).
struct ItemSpec {
  int tiles;
  bool rows[2];
};

struct Replay {
  Replay(int stages_, int consumers_, bool early, std::vector<ItemSpec> items_, std::mt19937 rng_)
      : stages(stages_),
        consumers(consumers_),
        early_release(early),
        items(std::move(items_)),
        rng(rng_) {}
  int stages, consumers;
  bool early_release;  // the bug this replay must catch: a consumer without rows releasing each
                       // buffer before its tile arrived
  std::vector<ItemSpec> items;
  std::mt19937 rng;

  std::vector<Barrier> full, empty, qfull, qempty;
  std::vector<Buffer> kv, q;
  std::string error;

  // The copies in flight: a buffer (kv or q) to land with its tag, then one arrival on its full.
  struct Copy {
    bool is_q;
    int buffer, tag;
  };
  std::vector<Copy> in_flight;

  // Each agent is a list of steps it runs in order; a step returns false while it must wait.
  struct Agent {
    std::vector<std::function<bool()>> steps;
    size_t next = 0;
  };

  void fail(const std::string& what) {
    if (error.empty()) error = what;
  }
  // A wait for use `use` of a barrier (the completion of its phase `use`): by parity, as the
  // kernel waits, checked against the phase count.
  bool wait_use(const Barrier& b, int use, uint32_t parity, const char* what) {
    if (b.completed > use + 1) fail(std::string(what) + ": the wait is two phases behind");
    const bool ready = b.done(parity);
    if (ready != (b.completed >= use + 1))
      fail(std::string(what) + ": the parity names another phase");
    return ready;
  }
  void read(const Buffer& b, int tag, const char* what) {
    if (b.tag != tag || !b.landed)
      fail(std::string(what) + " read another tile or an unlanded one");
  }

  Agent producer() {
    Agent a;
    int seq = 0;
    for (int iseq = 0; iseq <= int(items.size()); ++iseq) {
      const int qs = ring_buffer(iseq, focus_hard_ws::kQBuffers);
      a.steps.push_back([this, qs, iseq] {
        return wait_use(qempty[qs], iseq / focus_hard_ws::kQBuffers - 1,
                        empty_parity(iseq, focus_hard_ws::kQBuffers), "producer, Q buffer");
      });
      if (iseq == int(items.size())) {  // the end marker: arrivals without copies
        a.steps.push_back([this, qs] {
          qfull[qs].arrive();
          qfull[qs].arrive();
          return true;
        });
        break;
      }
      a.steps.push_back([this, qs, iseq] {  // the rows' copies and the release arrival
        q[qs] = {iseq, false};
        in_flight.push_back({true, qs, iseq});
        qfull[qs].arrive();
        return true;
      });
      for (int t = 0; t < items[iseq].tiles; ++t, ++seq) {
        const int b = ring_buffer(seq, stages);
        a.steps.push_back([this, b, seq] {
          return wait_use(empty[b], seq / stages - 1, empty_parity(seq, stages),
                          "producer, K / V buffer");
        });
        a.steps.push_back([this, b, seq] {
          kv[b] = {seq, false};
          in_flight.push_back({false, b, seq});
          full[b].arrive();
          return true;
        });
      }
    }
    return a;
  }

  // Consumer c, as the kernel's consumer loop orders it: the item's Q, then (with rows) tile t's
  // S issued before tile t - 1's P V, tile t - 1's buffer released after that P V; (without rows)
  // each buffer released once its tile arrived; the Q buffer released after the epilogue.
  Agent consumer(int c) {
    Agent a;
    int seq = 0;
    for (int iseq = 0; iseq < int(items.size()); ++iseq) {
      const int qs = ring_buffer(iseq, focus_hard_ws::kQBuffers);
      a.steps.push_back([this, qs, iseq] {
        return wait_use(qfull[qs], iseq / focus_hard_ws::kQBuffers,
                        full_parity(iseq, focus_hard_ws::kQBuffers), "consumer, Q buffer");
      });
      a.steps.push_back([this, qs, iseq] {
        read(q[qs], iseq, "consumer, Q buffer");
        return true;
      });
      const ItemSpec& it = items[iseq];
      auto wait_full = [this](int s) {
        return [this, s] {
          return wait_use(full[ring_buffer(s, stages)], s / stages, full_parity(s, stages),
                          "consumer, K / V buffer");
        };
      };
      auto use = [this](int s) {
        return [this, s] {
          read(kv[ring_buffer(s, stages)], s, "consumer, K / V buffer");
          return true;
        };
      };
      auto release = [this](int s) {
        return [this, s] {
          empty[ring_buffer(s, stages)].arrive();
          return true;
        };
      };
      if (!it.rows[c]) {
        for (int t = 0; t < it.tiles; ++t, ++seq) {
          if (!early_release) a.steps.push_back(wait_full(seq));
          a.steps.push_back(release(seq));
        }
      } else if (it.tiles > 0) {
        a.steps.push_back(wait_full(seq));
        a.steps.push_back(use(seq));  // S of the first tile
        for (int t = 1; t < it.tiles; ++t) {
          const int prev = seq++;
          a.steps.push_back(wait_full(seq));
          a.steps.push_back(use(seq));   // S of tile t
          a.steps.push_back(use(prev));  // P V of tile t - 1, in flight beside tile t's softmax
          a.steps.push_back(use(prev));  // (still its buffer when that P V completes)
          a.steps.push_back(release(prev));
        }
        a.steps.push_back(use(seq));  // the last P V
        a.steps.push_back(release(seq++));
      }
      a.steps.push_back([this, qs, iseq] {  // the epilogue reads the item's scalars, then releases
        read(q[qs], iseq, "consumer epilogue, Q buffer");
        qempty[qs].arrive();
        return true;
      });
    }
    a.steps.push_back([this, qs = ring_buffer(int(items.size()), focus_hard_ws::kQBuffers),
                       n = int(items.size())] {  // the end marker
      return wait_use(qfull[qs], n / focus_hard_ws::kQBuffers,
                      full_parity(n, focus_hard_ws::kQBuffers), "consumer, end marker");
    });
    return a;
  }

  // Runs the agents and the copies in random order to the end; the first error, or "" .
  std::string run() {
    full.assign(stages, Barrier{2, 0, 0});  // the producer's two arrivals (release, copies)
    empty.assign(stages, Barrier{consumers, 0, 0});
    qfull.assign(focus_hard_ws::kQBuffers, Barrier{2, 0, 0});
    qempty.assign(focus_hard_ws::kQBuffers, Barrier{consumers, 0, 0});
    kv.assign(stages, Buffer{});
    q.assign(focus_hard_ws::kQBuffers, Buffer{});
    std::vector<Agent> agents;
    agents.push_back(producer());
    for (int c = 0; c < consumers; ++c) agents.push_back(consumer(c));
    for (int step = 0; step < 1000000 && error.empty(); ++step) {
      // The runnable choices: an agent whose next step proceeds, or a copy landing.
      std::vector<int> ready;
      for (int i = 0; i < int(agents.size()); ++i) {
        Agent& a = agents[i];
        if (a.next < a.steps.size()) ready.push_back(i);
      }
      if (ready.empty() && in_flight.empty()) return error;  // everybody finished
      const int n_choices = int(ready.size() + in_flight.size());
      // Try the choices from a random one on until one makes progress.
      const int start = int(rng() % unsigned(n_choices));
      bool progressed = false;
      for (int k = 0; k < n_choices && !progressed; ++k) {
        const int choice = (start + k) % n_choices;
        if (choice < int(ready.size())) {
          Agent& a = agents[ready[choice]];
          if (a.steps[a.next]()) {
            ++a.next;
            progressed = true;
          }
        } else {
          const size_t i = size_t(choice) - ready.size();
          const Copy c = in_flight[i];
          in_flight.erase(in_flight.begin() + long(i));
          Buffer& b = c.is_q ? q[c.buffer] : kv[c.buffer];
          if (b.tag == c.tag) b.landed = true;  // (else rewritten before it landed: a read fails)
          (c.is_q ? qfull : full)[c.buffer].arrive();
          progressed = true;
        }
      }
      if (!progressed) return "deadlock: every agent waits and no copy is in flight";
    }
    return error.empty() ? "did not finish" : error;
  }
};

std::vector<ItemSpec> random_items(std::mt19937& rng, int n, int consumers) {
  std::vector<ItemSpec> items(n);
  for (ItemSpec& it : items) {
    it.tiles = int(rng() % 7);  // 0 .. 6 tiles (the kernel's items have at least one)
    for (int c = 0; c < 2; ++c) it.rows[c] = c < consumers && rng() % 4 != 0;
  }
  return items;
}

TEST(FocusHardWsRing, BuffersAreNeverRewrittenWhileReadAndNothingWaitsForever) {
  for (int consumers : {1, 2})
    for (int stages : {2, 3, 4, 5})
      for (uint32_t seed = 1; seed <= 60; ++seed) {
        std::mt19937 rng(seed * 7919u + uint32_t(stages * 31 + consumers));
        Replay r(stages, consumers, false, random_items(rng, 1 + int(rng() % 12), consumers), rng);
        EXPECT_EQ(r.run(), "") << "consumers " << consumers << " stages " << stages << " seed "
                               << seed;
      }
}

// The replay catches the bug the H100 found on 2026-12-06 (a consumer without rows releasing a
// buffer before its tile arrived counted towards the buffer's previous use, which the other
// consumer was still reading): some schedule of the same cases fails.
TEST(FocusHardWsRing, AnEarlyReleaseIsCaught) {
  int failed = 0;
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    std::mt19937 rng(seed * 7919u + 4u);
    Replay r(4, 2, true, random_items(rng, 1 + int(rng() % 12), 2), rng);
    failed += !r.run().empty();
  }
  EXPECT_GT(failed, 10) << "of 60 cases";
}

// The parities themselves: use u of a buffer is phase u of full; the producer's wait before use u
// names phase u - 1 of empty (for u = 0 the phase before the first, complete on a fresh barrier).
TEST(FocusHardWsRing, ParitiesNameTheUsesPhases) {
  for (int stages : {1, 2, 4, 5})
    for (int seq = 0; seq < 40; ++seq) {
      EXPECT_EQ(ring_buffer(seq, stages), seq % stages);
      EXPECT_EQ(full_parity(seq, stages), uint32_t((seq / stages) % 2));
      EXPECT_EQ(empty_parity(seq, stages), uint32_t((seq / stages + 1) % 2));
    }
  Barrier fresh;
  EXPECT_TRUE(fresh.done(empty_parity(0, 4)));
  EXPECT_FALSE(fresh.done(full_parity(0, 4)));
}

}  // namespace
}  // namespace attnlab
