#include "eval/synthetic_probe.h"

#include <unordered_map>

#include "core/error.h"

namespace attnlab {

namespace {

// `source`: the nearest earlier occurrence of the answer; its key is the token before it.
int recall_bucket(int64_t answer, int64_t source, int64_t window_start) {
  if (source - 1 < window_start) return 3;  // no occurrence with its key in the window
  const int64_t distance = answer - source;
  return distance < 128 ? 0 : distance < 512 ? 1 : 2;
}

nlohmann::json score_json(const KindScore& s) {
  return {{"acc", s.acc()}, {"loss", s.loss()}, {"count", s.count}};
}

}  // namespace

const char* recall_bucket_name(int bucket) {
  static const char* const names[kRecallBuckets] = {"lt128", "128to512", "ge512", "outside"};
  ATTN_ASSERT(bucket >= 0 && bucket < kRecallBuckets);
  return names[bucket];
}

void SyntheticScores::to_values(double* v) const {
  auto put = [&](const KindScore& s) {
    *v++ = s.loss_sum;
    *v++ = double(s.correct);
    *v++ = double(s.count);
  };
  for (const KindScore& s : by_kind) put(s);
  for (const KindScore& s : recall_by_distance) put(s);
  put(copied_outside);
}

void SyntheticScores::from_values(const double* v) {
  auto get = [&](KindScore& s) {
    s.loss_sum = *v++;
    s.correct = int64_t(*v++);
    s.count = int64_t(*v++);
  };
  for (KindScore& s : by_kind) get(s);
  for (KindScore& s : recall_by_distance) get(s);
  get(copied_outside);
}

nlohmann::json SyntheticScores::to_json() const {
  nlohmann::json j;
  for (int k = 0; k < kSyntheticKinds; ++k)
    j[synthetic_kind_name(SyntheticKind(k))] = score_json(by_kind[size_t(k)]);
  for (int b = 0; b < kRecallBuckets; ++b)
    j["recall_by_distance"][recall_bucket_name(b)] = score_json(recall_by_distance[size_t(b)]);
  j["copied_outside"] = score_json(copied_outside);
  return j;
}

std::string SyntheticScores::summary() const {
  static const char* const labels[kRecallBuckets] = {"<128", "128-512", ">=512", "outside"};
  std::string buckets;
  for (int b = 0; b < kRecallBuckets; ++b) {
    const KindScore& s = recall_by_distance[size_t(b)];
    if (s.count == 0) continue;
    buckets += strformat("%s%s %.3f", buckets.empty() ? "" : ", ", labels[b], s.acc());
  }
  const KindScore &r = kind(SyntheticKind::kRecall), &c = kind(SyntheticKind::kCopied);
  // (No target of a kind in the scored windows: said so, not an accuracy of 0.)
  const std::string recall = r.count == 0 ? std::string("recall: no targets")
                                          : strformat("recall acc %.3f (%s; %lld)", r.acc(),
                                                      buckets.c_str(), (long long)r.count);
  // Copied targets whose source is before the window: left out of the accuracy, their count said.
  const std::string apart = copied_outside.count == 0
                                ? std::string()
                                : strformat("; %lld more with their source before the window",
                                            (long long)copied_outside.count);
  const std::string copied = c.count == 0 ? strformat("copied: no targets%s", apart.c_str())
                                          : strformat("copied acc %.3f (%lld%s)", c.acc(),
                                                      (long long)c.count, apart.c_str());
  return recall + " | " + copied;
}

SyntheticProbe::SyntheticProbe(const std::vector<int32_t>& tokens, int vocab_size)
    : tokens_(tokens), kinds_(classify_synthetic(tokens, vocab_size)), source_(tokens.size(), -1) {
  // Recall: the latest earlier place the binding's value showed (the binding, then each answer).
  std::unordered_map<int64_t, int64_t> shown;  // binding position -> latest occurrence
  for (const RecallQuery& q : find_recall_queries(tokens, vocab_size)) {
    auto it = shown.try_emplace(q.binding_pos, q.binding_pos).first;
    source_[size_t(q.answer_pos)] = it->second;
    it->second = q.answer_pos;
  }
  // Copied: a run of copy sources, the separator, then the run of their copies.
  const size_t n = kinds_.size();
  for (size_t i = 0; i < n;) {
    if (kinds_[i] != SyntheticKind::kCopySource) {
      ++i;
      continue;
    }
    const size_t first = i;
    while (i < n && kinds_[i] == SyntheticKind::kCopySource) ++i;
    const size_t len = i - first;
    if (i >= n || kinds_[i] != SyntheticKind::kMarker) continue;
    ++i;
    for (size_t j = 0; j < len && i < n && kinds_[i] == SyntheticKind::kCopied; ++j, ++i)
      source_[i] = int64_t(first + j);
  }
}

std::unique_ptr<SyntheticProbe> SyntheticProbe::for_loader(const DataLoader& loader,
                                                           int vocab_size) {
  ATTN_REQUIRE(loader.sources().size() == 1,
               "synthetic retrieval metrics: the validation data must be one synthetic stream, got "
               "%zu sources",
               loader.sources().size());
  const TokenSource& src = *loader.sources()[0];
  std::vector<int32_t> tokens(size_t(src.size()));
  src.read(0, src.size(), tokens.data());
  return std::make_unique<SyntheticProbe>(tokens, vocab_size);
}

void SyntheticProbe::score_window(int64_t start, int T, const float* losses, const int32_t* argmax,
                                  SyntheticScores* scores) const {
  ATTN_REQUIRE(start >= 0 && start + T + 1 <= size(),
               "synthetic retrieval metrics: window [%lld, %lld) is outside the stream (%lld)",
               (long long)start, (long long)(start + T + 1), (long long)size());
  for (int i = 0; i < T; ++i) {
    const int64_t pos = start + i + 1;  // the target's stream position
    const bool correct = argmax[i] == tokens_[size_t(pos)];
    auto add = [&](KindScore& s) {
      s.loss_sum += double(losses[i]);
      s.correct += correct;
      ++s.count;
    };
    const SyntheticKind k = kinds_[size_t(pos)];
    const int64_t source = source_[size_t(pos)];
    if (k == SyntheticKind::kCopied && source < start) {
      add(scores->copied_outside);
      continue;
    }
    add(scores->by_kind[size_t(k)]);
    if (k == SyntheticKind::kRecall)
      add(scores->recall_by_distance[size_t(recall_bucket(pos, source, start))]);
  }
}

}  // namespace attnlab
