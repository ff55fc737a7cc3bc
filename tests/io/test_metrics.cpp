// Metrics JSON lines (append, truncate on resume), the progress line format, the rank-0 logger.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/logger.h"
#include "io/metrics.h"
#include "test_util.h"

namespace attnlab::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class Metrics : public ::testing::Test {
 protected:
  test::TempDir tmp_{"metrics"};
  const std::string dir_ = tmp_.path().string();
};

std::vector<json> read_lines(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

TEST_F(Metrics, WritesOneObjectPerLineVisibleImmediately) {
  std::string path = dir_ + "/metrics.jsonl";
  MetricsWriter w(path);
  w.write({{"step", 1}, {"loss", 10.5}, {"lr", 6e-4}});
  // Visible before the writer is closed: each record is written through at once.
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["loss"], 10.5);
  w.write({{"step", 2}, {"loss", NAN}, {"split", "train"}});
  lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(lines[1]["loss"].is_null());  // JSON has no NaN
  EXPECT_EQ(lines[1]["split"], "train");
  EXPECT_THROW(w.write({{"loss", 1.0}}), Error);  // no step
  EXPECT_THROW(w.write(json::array({1, 2})), Error);

  MetricsWriter fresh(path);  // a new run truncates
  EXPECT_EQ(read_file(path), "");
}

TEST_F(Metrics, ResumeDropsLaterStepsAndPartialLines) {
  std::string path = dir_ + "/metrics.jsonl";
  {
    MetricsWriter w(path);
    for (int s = 1; s <= 10; ++s) w.write({{"step", s}, {"loss", 10.0 - s}});
  }
  // A crash mid-write leaves half a record at the end.
  std::string text = read_file(path) + "{\"step\": 11, \"lo";
  write_file_atomic(path, text);

  {  // a resume that fails before its first record leaves the file as it was
    MetricsWriter failed(path, /*resume_step=*/3);
    EXPECT_EQ(failed.dropped_on_resume(), 8);
  }
  EXPECT_EQ(read_file(path), text);
  MetricsWriter w(path, /*resume_step=*/6);
  EXPECT_EQ(w.dropped_on_resume(), 5);  // steps 7..10 and the partial line
  EXPECT_EQ(read_file(path), text);
  w.write({{"step", 7}, {"loss", 2.5}});
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 7u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(lines[i]["step"], i + 1);
  EXPECT_EQ(lines[6]["loss"], 2.5);

  // Resuming where the file already ends changes nothing; a missing file is created.
  MetricsWriter again(path, 7);
  EXPECT_EQ(again.dropped_on_resume(), 0);
  EXPECT_EQ(read_lines(path).size(), 7u);
  MetricsWriter missing(dir_ + "/new.jsonl", 100);
  missing.write({{"step", 101}});
  EXPECT_EQ(read_lines(dir_ + "/new.jsonl").size(), 1u);
}

TEST_F(Metrics, UnwritablePathNamesTheFile) {
  test::expect_error([&] { MetricsWriter w(dir_ + "/no/such/dir/m.jsonl"); },
                     "cannot write '" + dir_ + "/no/such/dir/m.jsonl'");
}

TEST(ProgressLineTest, PlainFormatMatchesTheReference) {
  ProgressStats s;
  s.step = 120;
  s.total_steps = 1000;
  s.loss = 3.45213;
  s.lr = 5.8823e-4;
  s.grad_norm = 0.91234;
  s.tokens_per_s = 12345;
  s.step_ms = 245.2;
  s.eta_s = 215;
  EXPECT_EQ(ProgressLine(false).format(s),
            "step  120/1000 | loss 3.4521 | lr 5.88e-04 | norm 0.912 | 12.3K tok/s | 245 ms | "
            "ETA 3m35s");

  // Optional fields drop out; ETA is estimated from the step time when not given.
  ProgressStats t;
  t.step = 7;
  t.total_steps = 10;
  t.loss = NAN;
  t.step_ms = 2.5;
  t.extra = {{"focus_entropy", "0.53"}};
  EXPECT_EQ(ProgressLine(false).format(t),
            "step  7/10 | loss nan | 2.5 ms | focus_entropy 0.53 | ETA 0s");
}

TEST(ProgressLineTest, ColorOnlyAddsSgrCodes) {
  ProgressStats s;
  s.step = 3;
  s.total_steps = 50;
  s.loss = 1.0;
  s.tokens_per_s = 2.5e6;
  std::string plain = ProgressLine(false).format(s), color = ProgressLine(true).format(s);
  EXPECT_EQ(plain.find('\033'), std::string::npos);
  EXPECT_NE(color.find("\033[1m"), std::string::npos);
  EXPECT_EQ(std::regex_replace(color, std::regex("\033\\[[0-9;]*m"), ""), plain);
  EXPECT_EQ(color.find('\r'), std::string::npos);
  EXPECT_EQ(plain, "step  3/50 | loss 1.0000 | 2.50M tok/s");
}

TEST(ProgressLineTest, CountsAndDurations) {
  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(950), "950");
  EXPECT_EQ(format_count(999.4), "999");
  EXPECT_EQ(format_count(999.6), "1.00K");
  EXPECT_EQ(format_count(12345), "12.3K");
  EXPECT_EQ(format_count(123456), "123K");
  EXPECT_EQ(format_count(1.234e6), "1.23M");
  EXPECT_EQ(format_count(4.567e9), "4.57G");
  EXPECT_EQ(format_duration(0.4), "0s");
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(215), "3m35s");
  EXPECT_EQ(format_duration(3720), "1h02m");
  EXPECT_EQ(format_duration(2 * 86400 + 3 * 3600 + 59), "2d03h");
  EXPECT_EQ(format_duration(NAN), "?");
}

// The cases the ETAs of training and of `prepare` meet: rounding to the second carries into the
// next unit, and an estimate that is not a duration (negative, infinite) prints "?".
TEST(ProgressLineTest, DurationsRoundAndCarry) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(59.5), "1m00s");
  EXPECT_EQ(format_duration(3599.4), "59m59s");
  EXPECT_EQ(format_duration(3599.5), "1h00m");
  EXPECT_EQ(format_duration(86399), "23h59m");
  EXPECT_EQ(format_duration(86400), "1d00h");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(INFINITY), "?");
}

std::string drain(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[256];
  while (size_t n = std::fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
  return out;
}

TEST_F(Metrics, LoggerPrintsAndWritesOnlyOnRankZero) {
  std::FILE* out0 = std::tmpfile();
  std::FILE* out1 = std::tmpfile();
  ASSERT_TRUE(out0 && out1);
  Logger rank0(0, out0), rank1(1, out1);
  EXPECT_FALSE(rank0.color());  // not stderr: never colored by default
  rank0.open_metrics(dir_ + "/m0.jsonl");
  rank1.open_metrics(dir_ + "/m1.jsonl");
  for (const Logger* l : {&rank0, &rank1}) {
    l->info("loaded %d tensors from '%s'", 148, "ckpt.safetensors");
    l->warn("grad norm %.1f", 1e3);
    ProgressStats s;
    s.step = 1;
    s.total_steps = 2;
    s.loss = 2.0;
    l->progress(s);
    l->metrics({{"step", 1}, {"loss", 2.0}});
  }
  EXPECT_EQ(drain(out0),
            "loaded 148 tensors from 'ckpt.safetensors'\nwarning: grad norm 1000.0\n"
            "step 1/2 | loss 2.0000\n");
  EXPECT_EQ(drain(out1), "");
  EXPECT_EQ(read_lines(dir_ + "/m0.jsonl").size(), 1u);
  EXPECT_FALSE(fs::exists(dir_ + "/m1.jsonl"));
  std::fclose(out0);
  std::fclose(out1);
}

}  // namespace
}  // namespace attnlab::io
