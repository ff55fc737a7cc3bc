// Retrieval metrics on the synthetic associative-recall stream (data/synthetic.h, docs/eval.md
// "Synthetic retrieval"): per-kind loss and top-1 accuracy of the validation targets, and the
// recall targets (the value of QUERY key value) bucketed by the distance back to the nearest
// earlier occurrence of their answer.
//
// Target i of a window starting at stream position s is token s + i + 1, predicted by the logits
// at input position i (the model has seen tokens s .. s + i). Its kind is classify_synthetic's of
// that token; it is correct when the first maximum of the logits over [0, vocab_size) is the
// target (like torch.argmax); its loss is the model's per-token cross-entropy.
// Recall distance = answer position - the nearest earlier place the answer shows: its binding
// (the value of the key's most recent BIND, find_recall_queries) or an earlier QUERY of the same
// binding, whichever is later; where that place's key (the token before it) is before the
// window's first token, the target is "outside" (no earlier occurrence of the answer with its key
// in the window). Copied targets whose source token is before the window are scored apart
// (copied_outside): the model cannot see what they copy. (Until 2026-12-07 the distance was to
// the binding only, so the far buckets held answers shown a few tokens earlier by a repeated
// query, and copied counted unseeable sources.)
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/synthetic.h"

namespace attnlab {

struct KindScore {
  double loss_sum = 0.0;
  int64_t correct = 0, count = 0;
  double loss() const { return count > 0 ? loss_sum / double(count) : 0.0; }
  double acc() const { return count > 0 ? double(correct) / double(count) : 0.0; }
};

constexpr int kSyntheticKinds = int(SyntheticKind::kCopied) + 1;
// Recall distance buckets: < 128 (inside Focus's local window), [128, 512), >= 512, outside.
constexpr int kRecallBuckets = 4;
const char* recall_bucket_name(int bucket);  // "lt128", "128to512", "ge512", "outside"

struct SyntheticScores {
  std::array<KindScore, kSyntheticKinds> by_kind;  // indexed by SyntheticKind
  std::array<KindScore, kRecallBuckets> recall_by_distance;
  KindScore copied_outside;  // copied targets whose source is before the window (not in by_kind)
  const KindScore& kind(SyntheticKind k) const { return by_kind[size_t(k)]; }

  // The sums as one flat array (for a sum over ranks) and back.
  static constexpr int kValues = 3 * (kSyntheticKinds + kRecallBuckets + 1);
  void to_values(double* v) const;
  void from_values(const double* v);
  // {"recall": {"acc", "loss", "count"}, "copied": ..., every other kind, "recall_by_distance":
  // {"lt128": ..., "128to512": ..., "ge512": ..., "outside": ...}, "copied_outside": ...}.
  nlohmann::json to_json() const;
  // "recall acc 0.412 (<128 0.981, 128-512 0.300, >=512 0.100, outside 0.010) | copied acc 0.953"
  std::string summary() const;
};

class SyntheticProbe {
 public:
  // Labels of a synthetic stream (classify_synthetic, find_recall_queries).
  SyntheticProbe(const std::vector<int32_t>& tokens, int vocab_size);
  // The probe of a loader whose only source is a synthetic stream of `vocab_size` ids.
  static std::unique_ptr<SyntheticProbe> for_loader(const DataLoader& loader, int vocab_size);

  // Adds the T targets of the window whose first token is at stream position `start`: losses[i]
  // (nats) and argmax[i] for target i (token start + i + 1).
  void score_window(int64_t start, int T, const float* losses, const int32_t* argmax,
                    SyntheticScores* scores) const;

  int64_t size() const { return int64_t(tokens_.size()); }

 private:
  std::vector<int32_t> tokens_;
  std::vector<SyntheticKind> kinds_;
  // Per position: for a recall target the nearest earlier occurrence of its answer, for a copied
  // target the token it copies, else -1.
  std::vector<int64_t> source_;
};

}  // namespace attnlab
