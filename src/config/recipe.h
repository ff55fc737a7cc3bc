// Typed recipes: one struct per YAML section, each with its defaults and a validate() that checks
// the section alone; Recipe::validate() adds the checks that span sections. docs/recipes.md lists
// every key with its type, default and meaning.
//
// Loading order (later wins): struct defaults < model.preset < keys in the file < --set overrides.
// The preset is the final value of model.preset (file or --set), so `--set model.preset=gpt2-xl`
// on a file that sets n_layer keeps the file's n_layer: explicit keys always beat the preset.
//
// Errors are attnlab::Error and name the place and the key: "recipes/x.yaml:12: unknown key
// 'optim.learnig_rate'; did you mean 'optim.lr'?", "--set 'train.steps=abc': train.steps: expected
// an integer, got 'abc'". validate() throws ConfigError, which also carries the key path.
#pragma once
#include <array>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/parameters.h"

namespace attnlab {

// A recipe error about one key (key_path() = "train.seq_len"). parse_recipe() prefixes the
// message with the file and line that set that key.
class ConfigError : public Error {
 public:
  ConfigError(std::string key_path, const std::string& msg)
      : Error(msg), key_path_(std::move(key_path)) {}
  const std::string& key_path() const { return key_path_; }

 private:
  std::string key_path_;
};

// ---- enumerations: the YAML spelling of each value is EnumNames<E>::names[value] --------------
// `future` lists spellings that are planned but not implemented: they are rejected with
// "not supported yet" instead of "invalid value".
template <class E>
struct EnumNames;

enum class ModelFamily : uint8_t { gpt2, llama, mistral };
enum class NormKind : uint8_t { layernorm, rmsnorm };
enum class MlpKind : uint8_t { gelu, swiglu };
enum class PositionKind : uint8_t { learned, rope };
enum class RopeScalingKind : uint8_t { none, linear, llama3 };
enum class DataSource : uint8_t { synthetic, shards };
enum class OptimizerName : uint8_t { adamw };
enum class ScheduleType : uint8_t { cosine, linear, constant, wsd };
enum class DeviceChoice : uint8_t { auto_select, cpu, cuda };
enum class Precision : uint8_t { bf16, fp32 };
enum class Recompute : uint8_t { none, gelu, block };
enum class ColorMode : uint8_t { auto_detect, always, never };
enum class DistBackend : uint8_t { auto_select, none, mpi, nccl };
enum class FocusAssign : uint8_t { sinkhorn, softmax };
enum class FocusScope : uint8_t { causal, sequence };
enum class FocusGate : uint8_t { additive, multiplicative };
enum class FocusRouting : uint8_t { soft, hard };
enum class SfaKernel : uint8_t { auto_select, flash, masked_dense };

template <>
struct EnumNames<ModelFamily> {
  static constexpr std::array<std::string_view, 3> names{"gpt2", "llama", "mistral"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<NormKind> {
  static constexpr std::array<std::string_view, 2> names{"layernorm", "rmsnorm"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<MlpKind> {
  static constexpr std::array<std::string_view, 2> names{"gelu", "swiglu"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<PositionKind> {
  static constexpr std::array<std::string_view, 2> names{"learned", "rope"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<RopeScalingKind> {
  static constexpr std::array<std::string_view, 3> names{"none", "linear", "llama3"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<DataSource> {
  static constexpr std::array<std::string_view, 2> names{"synthetic", "shards"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<OptimizerName> {
  static constexpr std::array<std::string_view, 1> names{"adamw"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<ScheduleType> {
  static constexpr std::array<std::string_view, 4> names{"cosine", "linear", "constant", "wsd"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<DeviceChoice> {
  static constexpr std::array<std::string_view, 3> names{"auto", "cpu", "cuda"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<Precision> {
  static constexpr std::array<std::string_view, 2> names{"bf16", "fp32"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<Recompute> {
  static constexpr std::array<std::string_view, 3> names{"none", "gelu", "block"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<ColorMode> {
  static constexpr std::array<std::string_view, 3> names{"auto", "always", "never"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<DistBackend> {
  static constexpr std::array<std::string_view, 4> names{"auto", "none", "mpi", "nccl"};
  static constexpr std::array<std::string_view, 0> future{};
};

template <>
struct EnumNames<FocusAssign> {
  static constexpr std::array<std::string_view, 2> names{"sinkhorn", "softmax"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<FocusScope> {
  static constexpr std::array<std::string_view, 2> names{"causal", "sequence"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<FocusGate> {
  static constexpr std::array<std::string_view, 2> names{"additive", "multiplicative"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<FocusRouting> {
  static constexpr std::array<std::string_view, 2> names{"soft", "hard"};
  static constexpr std::array<std::string_view, 0> future{};
};
template <>
struct EnumNames<SfaKernel> {
  static constexpr std::array<std::string_view, 3> names{"auto", "flash", "masked_dense"};
  static constexpr std::array<std::string_view, 0> future{};
};

template <class E>
concept RecipeEnum = std::is_enum_v<E> && requires {
  EnumNames<E>::names;
};

// The YAML spelling of an enum value, e.g. enum_name(ScheduleType::wsd) == "wsd".
template <RecipeEnum E>
constexpr std::string_view enum_name(E e) {
  return EnumNames<E>::names[static_cast<size_t>(e)];
}

// ---- sections ---------------------------------------------------------------------------------

// model.rope_scaling: RoPE's frequency scaling for contexts past the pretraining length
// (kernels/position/rope_scaling.h has the formulas; Hugging Face's rope_scaling / rope_type):
// none; linear (factor); llama3 (LLaMA 3.1+: factor, low_freq_factor, high_freq_factor,
// original_context).
struct RopeScalingConfig {
  RopeScalingKind type = RopeScalingKind::none;
  double factor = 1;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int original_context = 8192;
  bool operator==(const RopeScalingConfig&) const = default;
};

struct ModelConfig {
  std::string preset;  // "" or one of model_preset_names()
  // The family's block choices are the defaults of norm, mlp, position, bias and tied_embeddings
  // (gpt2: layernorm, gelu, learned, true, true; llama and mistral: rmsnorm, swiglu, rope, false,
  // false); otherwise a label (the Hugging Face exporter picks its class from the block).
  ModelFamily family = ModelFamily::gpt2;
  int n_layer = 12;
  int n_head = 12;
  int n_kv_head = 0;  // 0 = n_head (no grouped-query attention)
  int n_embd = 768;
  int vocab_size = 50257;
  int block_size = 1024;  // maximum sequence length (learned position table size)
  int vocab_multiple = 128;
  NormKind norm = NormKind::layernorm;
  MlpKind mlp = MlpKind::gelu;
  PositionKind position = PositionKind::learned;
  bool bias = true;
  bool tied_embeddings = true;
  double norm_eps = 1e-5;
  double init_std = 0.02;
  int mlp_hidden = 0;         // MLP hidden width; 0: 4 n_embd (gelu) or LLaMA's rule (swiglu)
  double rope_theta = 10000;  // RoPE base (position: rope)
  RopeScalingConfig rope_scaling;

  int padded_vocab() const;  // vocab_size rounded up to a multiple of vocab_multiple
  int head_dim() const { return n_embd / n_head; }
  int kv_heads() const { return n_kv_head == 0 ? n_head : n_kv_head; }
  // mlp_hidden resolved: 4 n_embd (gelu) or LLaMA's 2/3 of it rounded up to 256 (swiglu)
  // (GPTConfig::mlp_hidden() computes the same).
  int mlp_hidden_width() const {
    if (mlp_hidden > 0) return mlp_hidden;
    return mlp == MlpKind::swiglu ? (8 * n_embd / 3 + 255) / 256 * 256 : 4 * n_embd;
  }
  // cross_checks false: each key's range only (a model whose other keys come from a checkpoint,
  // resolve_init_from, is checked across keys once they are there).
  void validate(bool cross_checks = true) const;
  bool operator==(const ModelConfig&) const = default;
};

// Sets the architecture keys of a named preset (model_preset_keys: its family, the family's block
// choices and its sizes); "" does nothing. Unknown names throw with the valid ones.
void apply_model_preset(ModelConfig& model, const std::string& preset);
const std::vector<std::string>& model_preset_names();  // gpt2 .. gpt2-xl, llama2-7b, ...
// The model.* keys a preset gives (a train.init_from checkpoint must agree with them): the GPT-2
// presets their sizes (n_layer, n_head, n_embd, vocab_size, block_size), the LLaMA family's
// every key they set.
std::vector<std::string> model_preset_keys(const std::string& preset);
// Sets the family's block choices (norm, mlp, position, bias, tied_embeddings).
void apply_family_defaults(ModelConfig& model, ModelFamily family);

// attention.focus: Focus attention (arXiv 2604.03260; docs/focus.md). Defaults are the paper's.
// Read whatever attention.type is (so a recipe can carry them), used when type is "focus".
struct FocusConfig {
  int groups = 8;          // K: number of groups (centroids)
  int d_g = 16;            // width of the group space (W_g: n_embd x d_g)
  int local_window = 128;  // w: pairs with 0 <= i - j <= w attend ungated
  double tau = 0.1;        // temperature of the scores S = cos(h W_g, C) / tau
  int iterations = 10;     // Sinkhorn iterations (assign: sinkhorn)
  int top_k = 2;           // groups a token keeps under hard routing
  FocusAssign assign = FocusAssign::sinkhorn;
  FocusScope sinkhorn_scope = FocusScope::causal;
  FocusGate gate = FocusGate::additive;
  double gate_eps = 1e-6;    // additive gate: weight exp(s) (a + eps) for distant pairs
  double gate_scale = 10.0;  // multiplicative gate: logit s * sigmoid(gate_scale a + gate_bias)
  double gate_bias = -5.0;
  FocusRouting route_training = FocusRouting::soft;  // hard: straight-through soft affinity
  FocusRouting eval_routing = FocusRouting::hard;    // routing of eval and generate
  void validate() const;
  // Why `key` (an attention.focus.* path) has no effect under these settings (e.g. gate_scale
  // with the additive gate), or "" where it is used: the trainer warns for a given key.
  std::string unused_key_reason(const std::string& key) const;
  bool operator==(const FocusConfig&) const = default;
};

// attention.sfa: Sparse Feature Attention (docs/sfa.md): each head's q and k keep their k
// largest-magnitude coordinates. Read whatever attention.type is, used when type is "sfa".
struct SfaConfig {
  int k = 0;            // coordinates kept per head vector; 0 = sfa_default_k(head dim)
  double distill = 0.;  // lambda of the dense-teacher term (docs/sfa.md), training only
  // training / eval path: FlashSFA, the reference path (masked copy + dense kernels), or auto
  // (the masked-dense path: faster on the H200 at every length measured, docs/sfa.md)
  SfaKernel kernel = SfaKernel::auto_select;
  void validate() const;
  bool operator==(const SfaConfig&) const = default;
};

// The default attention.sfa.k for a head dim: head_dim / 8 rounded up (8 for 64, 16 for 128).
inline int sfa_default_k(int head_dim) { return (head_dim + 7) / 8; }

// The steps a wsd schedule decays over: round(decay_frac x steps), decay_frac as the schedule's
// float (train/schedule.h); the recipe's check and the schedule agree through this one place.
inline int64_t wsd_decay_steps(float decay_frac, int64_t steps) {
  return std::lround(double(decay_frac) * double(steps));
}

struct AttentionConfig {
  std::string type = "dense";  // checked against the attention registry when the model is built
  int window = 0;              // sliding-window size in tokens; 0 = full causal attention
  FocusConfig focus;
  SfaConfig sfa;
  void validate() const;
  bool operator==(const AttentionConfig&) const = default;
};

// Relative weights of the synthetic segment kinds (data/synthetic.h SyntheticMix; docs/data.md).
struct SyntheticMixConfig {
  double markov = 45, bind = 20, query = 20, copy = 15;
  bool operator==(const SyntheticMixConfig&) const = default;
};

struct SyntheticDataConfig {
  int vocab_size = 512;  // ids drawn from [0, vocab_size); must be <= model.vocab_size
  int64_t train_tokens = 4000000;
  int64_t val_tokens = 262144;
  int64_t seed = 1234;
  SyntheticMixConfig mix;
  int keys = 0;    // BIND/QUERY keys in [0, keys); 0 = every content id (vocab_size - 8)
  int values = 0;  // BIND values: 0 = every content id; else [keys, keys + values) (or [0, values))
  int doc_min_tokens = 128, doc_max_tokens = 1024;
  bool operator==(const SyntheticDataConfig&) const = default;
};

struct DataConfig {
  DataSource source = DataSource::synthetic;
  std::string train;               // glob of token shard files (source: shards)
  std::string val;                 // glob of validation shard files
  std::string tokenizer = "byte";  // a make_tokenizer() spec
  bool shuffle = true;
  int64_t seed = 1337;
  SyntheticDataConfig synthetic;
  void validate() const;
  bool operator==(const DataConfig&) const = default;
};

struct OptimConfig {
  OptimizerName name = OptimizerName::adamw;
  double lr = 6e-4;  // peak learning rate
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied to 2-D weights only
  double grad_clip = 1.0;     // global gradient-norm clip; 0 = off
  void validate() const;
  bool operator==(const OptimConfig&) const = default;
};

struct ScheduleConfig {
  ScheduleType type = ScheduleType::cosine;
  int64_t warmup_steps = 0;    // linear warm-up from 0 to optim.lr
  double final_lr_frac = 0.0;  // final lr = final_lr_frac * optim.lr, in [0, 1]
  double decay_frac = 0.2;     // wsd: fraction of train.steps spent decaying, in (0, 1]
  void validate() const;
  bool operator==(const ScheduleConfig&) const = default;
};

struct TrainConfig {
  std::string name;          // run name (logs, metrics); "" = derived from the recipe file name
  int64_t steps = 1000;      // optimizer steps
  int micro_batch = 4;       // sequences per forward/backward on one rank
  int seq_len = 1024;        // tokens per sequence, <= model.block_size
  int64_t batch_tokens = 0;  // tokens per optimizer step over all ranks; 0 = micro_batch * seq_len
  DeviceChoice device = DeviceChoice::auto_select;
  Precision precision = Precision::bf16;
  int64_t seed = 1337;
  static constexpr int kMaxThreads = 1024;
  int threads = 0;  // CPU threads; 0 = all cores, at most kMaxThreads
  Recompute recompute = Recompute::none;
  std::string out_dir = "runs/default";
  bool deterministic = true;
  // Start a new run (fresh optimizer, step 0) from the weights of an attnlab, Hugging Face GPT-2
  // or llm.c checkpoint; the model.* keys the recipe does not give are the checkpoint's
  // (train/init_from.h, docs/recipes.md).
  std::string init_from;
  bool init_allow_extra = false;  // tensors of init_from that the model lacks are skipped

  int64_t micro_tokens() const { return int64_t(micro_batch) * seq_len; }
  int64_t tokens_per_step() const { return batch_tokens == 0 ? micro_tokens() : batch_tokens; }
  // Micro-batches each rank accumulates per optimizer step; throws when tokens_per_step() is not
  // a multiple of micro_tokens() * world_size.
  int grad_accum_steps(int world_size) const;
  void validate() const;
  bool operator==(const TrainConfig&) const = default;
};

struct EvalConfig {
  int64_t every = 100;  // evaluate every N steps; 0 = only at the end
  int batches = 20;     // micro-batches of validation data per evaluation
  bool at_end = true;
  bool at_start = false;  // also evaluate before the first step (a fine-tune's starting point)
  bool enabled() const { return every > 0 || at_end || at_start; }
  void validate() const;
  bool operator==(const EvalConfig&) const = default;
};

struct CheckpointConfig {
  int64_t every = 0;  // save every N steps; 0 = only at the end
  bool at_end = true;
  int keep_last = 2;  // checkpoints kept, the newest up to each save (docs/recipes.md)
  void validate() const;
  bool operator==(const CheckpointConfig&) const = default;
};

struct LogConfig {
  int64_t every = 1;                           // print a line every N steps
  std::string metrics_file = "metrics.jsonl";  // in train.out_dir; "" = no metrics file
  ColorMode color = ColorMode::auto_detect;
  void validate() const;
  bool operator==(const LogConfig&) const = default;
};

// Data parallelism over the ranks a launcher started (docs/distributed.md).
struct DistributedConfig {
  // auto: none for one process; several ranks: nccl on CUDA, mpi on the CPU.
  DistBackend backend = DistBackend::auto_select;
  int zero = 0;                 // 0: replicated optimizer state; 1: ZeRO-1 (state sharded by rank)
  double bucket_mb = 25.0;      // gradient all-reduce buckets (ZeRO 0), MiB of gradients
  double timeout_s = 300.0;     // a collective or rendezvous not done by then ends the job
  std::string rendezvous_file;  // nccl without mpirun or MASTER_ADDR: the unique id's path
  void validate() const;
  bool operator==(const DistributedConfig&) const = default;
};

// LoRA on attention projections (docs/retrofit.md): W x + (alpha / rank) B A x with A [rank, in]
// and B [out, rank] of role `adapter`, B zero at the start so step 0 is the base model.
struct LoraConfig {
  int rank = 0;  // 0 = no LoRA
  double alpha = 16.0;
  std::vector<std::string> targets{"c_attn"};  // projections that get one; only c_attn today
  void validate() const;
  bool operator==(const LoraConfig&) const = default;
};

// Retrofit (docs/retrofit.md): train some parameter roles of a pretrained model, every other
// tensor frozen (no gradient buffer, no optimizer state, skipped products in the backward).
struct RetrofitConfig {
  bool enabled = false;
  // The base model: an attnlab run or checkpoint directory, a Hugging Face GPT-2 directory or an
  // llm.c file. It is train.init_from's source (the model.* keys come from it, the same rules).
  std::string checkpoint;
  std::vector<std::string> train_roles{"attention"};  // parameter roles trained; others frozen
  LoraConfig lora;
  // The roles the optimizer updates: train_roles when enabled, every role otherwise.
  std::set<ParamRole> trainable_roles() const;
  void validate() const;
  bool operator==(const RetrofitConfig&) const = default;
};

// What a recipe is loaded for. Training needs data.train (source: shards) and validation data
// while evaluation is on; `attnlab eval` reads only the data it is given (its own checks).
enum class RecipeUse : uint8_t { train, eval };

// Where each key given by the recipe file or --set came from ("recipes/x.yaml:4"), keyed by path
// ("model.n_layer"); keys left at their defaults are absent. Provenance, not part of the recipe's
// value: two recipes with the same values are equal whatever set them, and recipe_to_yaml does not
// write it.
struct GivenKeys {
  std::map<std::string, std::string> where;
  bool contains(const std::string& key) const { return where.count(key) != 0; }
  bool operator==(const GivenKeys&) const { return true; }
};

struct Recipe {
  ModelConfig model;
  AttentionConfig attention;
  DataConfig data;
  OptimConfig optim;
  ScheduleConfig schedule;
  TrainConfig train;
  EvalConfig eval;
  CheckpointConfig checkpoint;
  LogConfig log;
  DistributedConfig distributed;
  RetrofitConfig retrofit;
  GivenKeys given;  // filled by parse_recipe

  // Every section's validate(), then the checks across sections (seq_len <= block_size, ...).
  // With train.init_from or a retrofit's checkpoint the checks that involve the model keys it
  // does not give wait until model_resolved (resolve_init_from takes those keys from the
  // checkpoint, then validates with it true).
  void validate(RecipeUse use = RecipeUse::train, bool model_resolved = false) const;
  bool operator==(const Recipe&) const = default;
};

// ---- loading and saving -----------------------------------------------------------------------

// Parses YAML text (source_name is used in messages), applies `overrides` ("a.b=value", the value
// parsed as a YAML scalar or flow list) and validates for `use`. Throws attnlab::Error.
// Recipe::given records which keys the file or an override set, and where.
Recipe parse_recipe(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides = {},
                    RecipeUse use = RecipeUse::train);

// Reads the file at `path` and calls parse_recipe.
Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides = {},
                   RecipeUse use = RecipeUse::train);

// A model.rope_scaling key that `r` gives with a value other than its default although the
// resolved type does not read it (none reads no key, linear only factor), or (with
// `need_factor`) a linear / llama3 type whose factor is not given: the message naming the key and
// where it was given; "" when there is none. (A resolved recipe gives every key, the unread ones
// at their defaults, so those pass.)
std::string rope_scaling_key_problem(const Recipe& r, bool need_factor);

// The first line of recipe_to_yaml's text (a run's recipe.yaml starts with it).
inline constexpr const char* kResolvedRecipeHeader =
    "# attnlab recipe, fully resolved (every key; docs/recipes.md)";
// The resolved recipe as YAML: every key of every section, in schema order. Loading it gives back
// an identical Recipe (parse_recipe(recipe_to_yaml(r), ...) == r).
std::string recipe_to_yaml(const Recipe& recipe);

// Every leaf key path of the schema in order ("model.preset", ..., "retrofit.train_roles").
std::vector<std::string> recipe_key_paths();

// Every leaf of the resolved recipe with its value as YAML flow text ("optim.lr" -> "0.0006"), in
// schema order: what the ranks compare at start (dist/consistency.h) and a resume lists as changed.
std::vector<std::pair<std::string, std::string>> recipe_leaves(const Recipe& recipe);

}  // namespace attnlab
