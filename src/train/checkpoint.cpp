#include "train/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc 2.28)
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>

#include "config/model_keys.h"
#include "config/suggest.h"
#include "core/error.h"
#include "core/hash.h"
#include "interop/foreign_tensors.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "nn/lora.h"

namespace fs = std::filesystem;

namespace attnlab {
namespace {

// optimizer.safetensors metadata: the ParamLayout of its tensors.
constexpr const char* kParamLayoutKey = "param_layout";

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

// What SafetensorsFile::load_into converts: the same dtype, or F32/BF16/F16 into F32/BF16.
bool loads_into(io::StDType file, DType model) {
  const auto is_float = [](io::StDType t) {
    return t == io::StDType::F32 || t == io::StDType::BF16 || t == io::StDType::F16;
  };
  if (file == io::st_dtype_of(model)) return true;
  return is_float(file) && (model == DType::f32 || model == DType::bf16);
}

// Where save_checkpoint moves a step's older checkpoint while replacing it (no RENAME_EXCHANGE).
fs::path old_name(const fs::path& dir) { return dir.string() + ".old"; }

void fsync_dir(const std::string& dir) {
  // Makes the rename itself durable (best effort: some filesystems refuse fsync on directories).
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

std::vector<std::pair<int64_t, std::string>> checkpoint_steps(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> steps;
  std::error_code ec;
  const fs::path root = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(root, ec)) return steps;
  for (const auto& d : fs::directory_iterator(root, ec)) {
    const std::string n = d.path().filename().string();
    if (n.rfind("step_", 0) != 0 || n.size() == 5 ||
        n.find_first_not_of("0123456789", 5) != std::string::npos || n.size() > 5 + 18 ||
        !d.is_directory(ec))  // (a symlink loop among the entries must not stop the run)
      continue;
    steps.emplace_back(std::stoll(n.substr(5)), n);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

bool run_has_checkpoints(const std::string& run_dir) {
  return fs::exists(fs::path(run_dir) / "checkpoints" / "latest");
}

std::string save_checkpoint(const std::string& run_dir, const CheckpointContents& c,
                            int keep_last) {
  ATTN_ASSERT(c.store != nullptr);
  const fs::path root = fs::path(run_dir) / "checkpoints";
  io::ensure_dir(root.string());
  const std::string name = step_name(c.state.step);
  const fs::path final_dir = root / name;
  const fs::path tmp_dir = root / (name + ".tmp");
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
  io::ensure_dir(tmp_dir.string());

  io::SafetensorsWriter model;
  for (const auto& e : c.store->entries()) model.add(e.spec.name, c.store->param(e.spec.name));
  model.set_metadata("format", "attnlab");
  model.set_metadata("step", std::to_string(c.state.step));
  model.set_metadata("recipe", c.recipe_yaml);
  model.write((tmp_dir / "model.safetensors").string());

  // The optimizer state is laid out over the store's trainable range: saved with that layout so
  // that a load into another layout is refused (AdamW::load_state).
  const ParamLayout layout = c.store->trainable_layout();
  io::SafetensorsWriter optim;
  for (const auto& [n, t] : c.optimizer_state) {
    ATTN_ASSERT(t.numel() == layout.numel);
    optim.add(n, t);
  }
  optim.set_metadata("step", std::to_string(c.state.step));
  optim.set_metadata(kParamLayoutKey, layout.to_json());
  optim.write((tmp_dir / "optimizer.safetensors").string());

  nlohmann::json js = {{"step", c.state.step},
                       {"data_epoch", c.state.data_epoch},
                       {"data_position", c.state.data_position},
                       {"tokens_seen", c.state.tokens_seen},
                       {"elapsed_seconds", c.state.elapsed_seconds}};
  if (!c.state.data_fingerprint.empty()) js["data_fingerprint"] = c.state.data_fingerprint;
  if (!c.state.device.empty()) js["device"] = c.state.device;
  if (!c.state.precision.empty()) js["precision"] = c.state.precision;
  io::write_file_atomic((tmp_dir / "trainer_state.json").string(), js.dump(2) + "\n");
  io::write_file_atomic((tmp_dir / "recipe.yaml").string(), c.recipe_yaml);
  if (c.write_extra) c.write_extra(tmp_dir.string());
  if (!c.tokenizer_json.empty())
    io::write_file_atomic((tmp_dir / "tokenizer.json").string(), c.tokenizer_json);
  if (!c.generation_config_json.empty())
    io::write_file_atomic((tmp_dir / "generation_config.json").string(), c.generation_config_json);

  // An older checkpoint of the same step (a re-run after resume) is replaced so that the step's
  // directory holds a complete checkpoint at every moment: swapped with the new one in one
  // rename (RENAME_EXCHANGE), or where the filesystem cannot, moved aside to <name>.old first
  // (resolve_checkpoint_dir reads that one if a crash comes before the second rename), and
  // removed only after.
  auto move = [&](const fs::path& from, const fs::path& to) {
    fs::rename(from, to, ec);
    ATTN_REQUIRE(!ec, "cannot rename '%s' to '%s': %s", from.c_str(), to.c_str(),
                 ec.message().c_str());
  };
  fs::path stale;  // the older checkpoint once the new one is in place
  if (!fs::exists(final_dir)) {
    move(tmp_dir, final_dir);
  } else if (::renameat2(AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) ==
             0) {
    stale = tmp_dir;  // the old checkpoint, now under the temporary name
  } else {
    stale = old_name(final_dir);
    fs::remove_all(stale, ec);
    move(final_dir, stale);
    move(tmp_dir, final_dir);
  }
  fsync_dir(root.string());
  if (!stale.empty()) fs::remove_all(stale, ec);
  io::write_file_atomic((root / "latest").string(), name + "\n");

  // Keep the newest keep_last checkpoints up to this step, by step number (names are sorted as
  // text only up to 8 digits). Later steps are another continuation's (a run resumed from an
  // earlier checkpoint): they are not this run's history, so they neither count nor go.
  // Leftovers of an interrupted save (a kill, a full disk): another step's <name>.tmp is an
  // incomplete or superseded copy and goes; a <name>.old is the step's older checkpoint, a
  // leftover where the step's directory is complete, else the step's checkpoint itself
  // (resolve_checkpoint_dir reads it), put back in place so that keep_last counts it.
  std::vector<fs::path> leftovers;
  for (const auto& d : fs::directory_iterator(root, ec)) {
    const std::string n = d.path().filename().string();
    if (n.rfind("step_", 0) == 0 && (n.ends_with(".tmp") || n.ends_with(".old")))
      leftovers.push_back(d.path());
  }
  for (const fs::path& p : leftovers) {
    const fs::path step_dir = p.parent_path() / p.stem();  // without .tmp / .old
    if (p.extension() == ".old" && !fs::exists(step_dir / "model.safetensors", ec) &&
        fs::exists(p / "model.safetensors", ec)) {
      fs::remove_all(step_dir, ec);
      fs::rename(p, step_dir, ec);
    } else {
      fs::remove_all(p, ec);
    }
  }
  std::vector<std::pair<int64_t, std::string>> steps = checkpoint_steps(run_dir);
  std::erase_if(steps, [&](const auto& s) { return s.first > c.state.step; });
  for (size_t i = 0; i + size_t(std::max(keep_last, 1)) < steps.size(); ++i)
    if (steps[i].second != name) fs::remove_all(root / steps[i].second, ec);
  return final_dir.string();
}

std::string allow_extra_hint(const WeightLoadOptions& options) {
  return options.allow_extra_key ? strformat("; set %s: true to load the others and skip these",
                                             options.allow_extra_key)
                                 : "";
}

std::optional<Recipe> read_checkpoint_recipe(const std::string& dir) {
  const fs::path file = fs::path(dir) / "recipe.yaml";
  std::optional<Recipe> yaml;
  if (fs::exists(file)) yaml = parse_recipe(io::read_file(file.string()), file.string(), {});
  // The same resolved recipe rides in the weights' metadata (save_checkpoint).
  const fs::path model = fs::path(dir) / "model.safetensors";
  if (!fs::exists(model)) return yaml;
  const io::SafetensorsFile f(model.string(), io::SafetensorsFile::DataCheck::header_only);
  const auto it = f.metadata().find("recipe");
  if (it == f.metadata().end() || it->second.empty()) return yaml;
  Recipe saved = parse_recipe(it->second, model.string() + " (metadata \"recipe\")", {});
  if (!yaml) return saved;
  // The keys that decide the model's function must be the ones its weights were trained with:
  // a recipe.yaml edited there (another tau, window or head count) built another model from
  // the same weights, silently (eval, generate, --resume's comparison).
  const char* differs = !(yaml->model == saved.model)                   ? "model"
                        : !(yaml->attention == saved.attention)         ? "attention"
                        : !(yaml->retrofit.lora == saved.retrofit.lora) ? "retrofit.lora"
                                                                        : nullptr;
  ATTN_REQUIRE(!differs,
               "checkpoint '%s': its recipe.yaml and the recipe saved with its weights "
               "(model.safetensors' metadata) differ in the %s keys (recipe.yaml edited by "
               "hand?); the weights were trained with the saved one: restore recipe.yaml, or "
               "give changed evaluation keys with --set instead",
               dir.c_str(), differs);
  return yaml;
}

namespace {

// The keys whose 0 means a value resolved from others, resolved: what the run uses.
Recipe resolved_defaults(Recipe r) {
  r.model.n_kv_head = r.model.kv_heads();
  const int head_dim = head_dim_of(r.model);
  if (r.attention.sfa.k == 0 && head_dim > 0) r.attention.sfa.k = sfa_default_k(head_dim);
  return r;
}

}  // namespace

std::string check_resume_recipe(const Recipe& recipe, const std::string& dir) {
  const std::optional<Recipe> trained = read_checkpoint_recipe(dir);
  ATTN_REQUIRE(trained.has_value(),
               "--resume %s: the checkpoint has no recipe.yaml and its model.safetensors no "
               "recipe metadata, so the recipe's model cannot be checked against it; restore "
               "its recipe.yaml, or start a new run from it with train.init_from",
               dir.c_str());
  // What trains is fixed too: the optimizer state holds those tensors' moments.
  std::string diffs;
  auto roles = [](const std::vector<std::string>& v) {
    return strformat("[%s]", join_names(v).c_str());
  };
  if (recipe.retrofit.enabled != trained->retrofit.enabled)
    diffs += strformat("\n  retrofit.enabled: %s in the recipe, %s in the checkpoint",
                       recipe.retrofit.enabled ? "true" : "false",
                       trained->retrofit.enabled ? "true" : "false");
  if (recipe.retrofit.enabled &&  // the roles as a set: their order changes nothing
      recipe.retrofit.trainable_roles() != trained->retrofit.trainable_roles())
    diffs += strformat("\n  retrofit.train_roles: %s in the recipe, %s in the checkpoint",
                       roles(recipe.retrofit.train_roles).c_str(),
                       roles(trained->retrofit.train_roles).c_str());
  diffs += model_function_conflicts(recipe, *trained, "the checkpoint");
  ATTN_REQUIRE(diffs.empty(),
               "--resume %s: the recipe's model differs from the checkpoint's:%s\n"
               "a resume continues the checkpoint's model and what it trains (its recipe.yaml); "
               "give the same model, attention and retrofit keys, or start a new run from it "
               "with train.init_from",
               dir.c_str(), diffs.c_str());
  const auto leaves = recipe_leaves(resolved_defaults(*trained));
  const std::map<std::string, std::string> was(leaves.begin(), leaves.end());
  std::string changes;
  for (const auto& [key, value] : recipe_leaves(resolved_defaults(recipe))) {
    const auto it = was.find(key);
    const std::string before = it == was.end() ? "(none)" : it->second;
    if (before != value)
      changes += (changes.empty() ? "" : ", ") + key + " " + before + " -> " + value;
  }
  return changes;
}

std::string resolve_checkpoint_dir(const std::string& path) {
  fs::path p(path);
  ATTN_REQUIRE(fs::exists(p), "checkpoint path '%s' does not exist", path.c_str());
  if (fs::exists(p / "model.safetensors")) return p.string();
  fs::path latest = p / "checkpoints" / "latest";
  // A run that stopped before its first checkpoint (checkpoint.every 0 and no at_end, or killed
  // early) is a run directory all the same: say so.
  ATTN_REQUIRE(fs::exists(latest) || !fs::exists(p / "recipe.yaml"),
               "'%s' is a run directory without a checkpoint yet (the run stopped before its "
               "first: checkpoint.every and checkpoint.at_end set when they are written); "
               "nothing to resume or load",
               path.c_str());
  ATTN_REQUIRE(fs::exists(latest),
               "'%s' is neither a checkpoint directory (no model.safetensors) "
               "nor a run directory (no checkpoints/latest)",
               path.c_str());
  std::string name = io::read_file(latest.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  fs::path dir = p / "checkpoints" / name;
  // A crash while a re-run replaced this step's checkpoint (save_checkpoint without
  // RENAME_EXCHANGE) can leave the complete older one aside.
  if (!fs::exists(dir / "model.safetensors") && fs::exists(old_name(dir) / "model.safetensors"))
    return old_name(dir).string();
  ATTN_REQUIRE(fs::exists(dir / "model.safetensors"),
               "'%s' names checkpoint '%s', which is missing "
               "or incomplete",
               latest.c_str(), name.c_str());
  return dir.string();
}

void load_model_weights(const std::string& ckpt_dir, const ParameterStore& store,
                        std::vector<float>* exact) {
  // Every tensor of the model from the file, and every tensor of the file used: a checkpoint of
  // another shape (4 layers into a 3-layer model) is refused, naming the tensors it has extra.
  WeightLoadOptions strict;
  strict.required_roles = {ParamRole::base, ParamRole::attention, ParamRole::adapter};
  strict.allow_extra = false;
  TrainableF32Values values(store);
  if (exact && store.dtype() == DType::bf16) strict.on_f32_values = values.taker();
  load_model_weights_by_role(ckpt_dir, store, strict);
  if (exact) *exact = values.finish();
}

TrainableF32Values::TrainableF32Values(const ParameterStore& store) : store_(store) {}

void TrainableF32Values::take(const std::string& name, const float* values, int64_t n) {
  if (!store_.contains(name)) return;
  const ParameterStore::Entry& e = store_.entry(name);
  if (!e.trainable || n != e.spec.shape.numel()) return;
  if (values_.empty()) values_.resize(size_t(store_.trainable_buffer_numel()));
  std::copy(values, values + n, values_.begin() + e.offset);
  taken_.insert(name);
}

std::vector<float> TrainableF32Values::finish() {
  if (taken_.empty()) return {};
  for (const auto& e : store_.entries())
    if (e.trainable && !taken_.count(e.spec.name)) {
      const std::vector<float> w = tensor_to_host_f32(store_.param(e.spec.name));
      std::copy(w.begin(), w.end(), values_.begin() + e.offset);
    }
  taken_.clear();
  return std::move(values_);
}

void for_each_master_tensor(
    const std::string& ckpt_dir,
    const std::function<void(const std::string&, const float*, int64_t)>& take) {
  const fs::path path = fs::path(ckpt_dir) / "optimizer.safetensors";
  if (!fs::exists(path)) return;
  io::SafetensorsFile f(path.string());
  const auto it = f.metadata().find(kParamLayoutKey);
  if (!f.contains("adamw.master") || it == f.metadata().end()) return;
  const ParamLayout layout = ParamLayout::from_json(it->second, f.path());
  const Tensor master = f.view("adamw.master");
  ATTN_REQUIRE(master.dtype == DType::f32 && master.numel() >= layout.numel,
               "%s: 'adamw.master' must be f32 with %lld elements (its param_layout), got %s",
               f.path().c_str(), (long long)layout.numel, master.str().c_str());
  for (const ParamLayout::Item& t : layout.tensors)
    take(t.name, master.ptr<float>() + t.offset, t.shape.numel());
}

bool load_optimizer_state(const std::string& ckpt_dir, AdamW& opt) {
  io::SafetensorsFile f((fs::path(ckpt_dir) / "optimizer.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> views;
  for (const auto& n : f.names()) views.emplace_back(n, f.view(n));
  const auto it = f.metadata().find(kParamLayoutKey);
  if (it == f.metadata().end())
    opt.load_packed_state(views, f.path());
  else
    opt.load_state(views, ParamLayout::from_json(it->second, f.path()), f.path());
  return f.contains("adamw.master");
}

std::string WeightLoadReport::summary() const {
  const auto join = [](const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
  };
  std::string out;
  if (!initialised.empty()) out = "initialised (not in checkpoint): " + join(initialised);
  if (!ignored.empty())
    out += (out.empty() ? "" : "; ") + std::string("ignored (not in the model): ") + join(ignored);
  return out;
}

WeightLoadReport load_model_weights_by_role(const std::string& ckpt_dir,
                                            const ParameterStore& store,
                                            const WeightLoadOptions& options) {
  io::SafetensorsFile f((fs::path(ckpt_dir) / "model.safetensors").string());
  const char* path = f.path().c_str();
  WeightLoadReport report;
  for (const auto& e : store.entries()) {
    const std::string& name = e.spec.name;
    if (!f.contains(name)) {
      ATTN_REQUIRE(!options.required_roles.count(e.spec.role),
                   "checkpoint '%s' has no tensor '%s' (role %s) that the model needs", path,
                   name.c_str(), role_name(e.spec.role));
      report.initialised.push_back(name);
      continue;
    }
    const io::TensorInfo& ti = f.info(name);
    std::vector<int64_t> want(e.spec.shape.dims.begin(),
                              e.spec.shape.dims.begin() + e.spec.shape.ndim);
    ATTN_REQUIRE(ti.shape == want,
                 "checkpoint '%s': tensor '%s' has shape %s, the model expects %s", path,
                 name.c_str(), ti.shape_str().c_str(), e.spec.shape.str().c_str());
    ATTN_REQUIRE(loads_into(ti.dtype, store.dtype()),
                 "checkpoint '%s': tensor '%s' is %s, which cannot load into the model's %s", path,
                 name.c_str(), io::st_dtype_name(ti.dtype), dtype_name(store.dtype()));
    report.loaded.push_back(name);
  }
  std::vector<std::string> extra;
  for (const auto& n : f.names())
    if (!store.contains(n)) extra.push_back(n);
  if (!extra.empty()) {
    std::string names;
    for (const auto& n : extra) names += (names.empty() ? "" : ", ") + n;
    // Unmerged LoRA adapters are part of the trained function: skipping them (allow_extra) would
    // give the base without its fine-tune. Refused whatever allow_extra says.
    const bool lora = std::any_of(extra.begin(), extra.end(), LoraBranch::is_tensor_name);
    ATTN_REQUIRE(!lora,
                 "checkpoint '%s' holds unmerged LoRA adapters (%s): a model without them would "
                 "load only the base and lose the fine-tune; merge them first (attnlab convert "
                 "<that checkpoint> <out_dir> --to attnlab) and start from the merged checkpoint",
                 path, names.c_str());
    ATTN_REQUIRE(options.allow_extra,
                 "checkpoint '%s' has %zu tensor(s) that the model does not have (a checkpoint of "
                 "another model shape?): %s%s",
                 path, extra.size(), names.c_str(), allow_extra_hint(options).c_str());
    report.ignored = extra;
  }
  for (const auto& n : report.loaded) {
    f.load_into(n, store.param(n));
    if (options.on_f32_values && f.info(n).dtype == io::StDType::F32) {
      const Tensor t = f.view(n);
      options.on_f32_values(n, t.ptr<float>(), t.numel());
    }
  }
  return report;
}

std::string data_fingerprint(const std::vector<std::shared_ptr<const TokenSource>>& sources) {
  uint64_t h = kFnv1aOffset;  // over each source's file name (not its directory) and sample hash
  int64_t tokens = 0;
  for (const auto& src : sources) {
    const std::string name = fs::path(src->name()).filename().string();
    const uint64_t sample = token_sample_hash(*src);
    h = fnv1a(name.data(), name.size() + 1, h);  // (with its terminating 0)
    h = fnv1a(&sample, sizeof(sample), h);
    tokens += src->size();
  }
  return strformat("%zu sources, %lld tokens, %016llx", sources.size(), (long long)tokens,
                   (unsigned long long)h);
}

void check_checkpoint_steps(const std::string& ckpt_dir, int64_t step) {
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const fs::path path = fs::path(ckpt_dir) / file;
    if (!fs::exists(path)) continue;
    const io::SafetensorsFile f(path.string(), io::SafetensorsFile::DataCheck::header_only);
    const auto it = f.metadata().find("step");
    if (it == f.metadata().end()) continue;  // written by another tool: nothing to compare
    ATTN_REQUIRE(it->second == std::to_string(step),
                 "checkpoint '%s': %s is of step %s but trainer_state.json of step %lld (files "
                 "of different checkpoints mixed by hand?); resume from a checkpoint whose files "
                 "belong together",
                 ckpt_dir.c_str(), file, it->second.c_str(), (long long)step);
  }
}

TrainerState load_trainer_state(const std::string& ckpt_dir) {
  const std::string path = (fs::path(ckpt_dir) / "trainer_state.json").string();
  nlohmann::json js;
  try {
    js = nlohmann::json::parse(io::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    ATTN_FAIL("corrupt trainer state '%s': %s", path.c_str(), e.what());
  }
  ATTN_REQUIRE(js.is_object(), "corrupt trainer state '%s': expected a JSON object", path.c_str());
  // Each field of its type and range, named when it is not (a hand edit, a torn file): a step of
  // 3.5 or a position of -1 was taken as 3 or 2^64 - 1.
  auto count = [&](const char* key) {
    ATTN_REQUIRE(js.contains(key), "corrupt trainer state '%s': no field '%s'", path.c_str(), key);
    const nlohmann::json& v = js.at(key);
    ATTN_REQUIRE(v.is_number_integer() && (v.is_number_unsigned() || v.get<int64_t>() >= 0),
                 "corrupt trainer state '%s': '%s' must be an integer >= 0, got %s", path.c_str(),
                 key, v.dump().c_str());
    ATTN_REQUIRE(v.get<uint64_t>() <= uint64_t(INT64_MAX),
                 "corrupt trainer state '%s': '%s' is too large (%s)", path.c_str(), key,
                 v.dump().c_str());
    return v.get<int64_t>();
  };
  auto text = [&](const char* key, std::initializer_list<const char*> valid) {
    if (!js.contains(key)) return std::string();  // older checkpoints
    const nlohmann::json& v = js.at(key);
    ATTN_REQUIRE(v.is_string(), "corrupt trainer state '%s': '%s' must be a string, got %s",
                 path.c_str(), key, v.dump().c_str());
    const std::string x = v.get<std::string>();
    bool ok = valid.size() == 0;
    for (const char* w : valid) ok = ok || x == w;
    ATTN_REQUIRE(ok, "corrupt trainer state '%s': '%s' is '%s'", path.c_str(), key, x.c_str());
    return x;
  };
  TrainerState s;
  s.step = count("step");
  s.data_epoch = uint64_t(count("data_epoch"));
  s.data_position = uint64_t(count("data_position"));
  s.tokens_seen = count("tokens_seen");
  ATTN_REQUIRE(js.contains("elapsed_seconds") && js.at("elapsed_seconds").is_number() &&
                   std::isfinite(js.at("elapsed_seconds").get<double>()) &&
                   js.at("elapsed_seconds").get<double>() >= 0,
               "corrupt trainer state '%s': 'elapsed_seconds' must be a number >= 0, got %s",
               path.c_str(),
               js.contains("elapsed_seconds") ? js.at("elapsed_seconds").dump().c_str() : "none");
  s.elapsed_seconds = js.at("elapsed_seconds").get<double>();
  s.data_fingerprint = text("data_fingerprint", {});
  s.device = text("device", {"cpu", "cuda"});
  s.precision = text("precision", {"f32", "bf16"});
  return s;
}

}  // namespace attnlab
