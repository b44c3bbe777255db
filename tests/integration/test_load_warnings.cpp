// What the user sees when a hybrid file's layer-kind metadata disagrees with its tensors: the
// real binary loads it, prints one warning naming the layers on stderr (the engine returns it,
// app prints it) and computes what the consistent original computes; a file whose tensors
// contradict themselves is refused with one clear error. And an option that cannot act (a GPU
// option when the model runs on the CPU) says so instead of being taken silently, and a
// command's own default for one says nothing.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/serve.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

constexpr const char* kQwen35 = "arch/qwen35/qwen35.gguf";
constexpr const char* kLlama = "arch/llama/llama.gguf";

// A copy of the qwen35 fixture with full_attention_interval = `interval` and, if `extra` is
// set, blk.3.attn_q.weight copied under that name too.
std::string modified_qwen35(const TempDir& tmp, int64_t interval, const std::string& extra = {}) {
    const auto f = GgufFile::open(fixture_path(kQwen35));
    GgufWriter w;
    for (const std::string& key : f->metadata_order()) w.copy_from(*f, key);
    w.set("qwen35.full_attention_interval", GgufValue{GgufValueType::U32, interval});
    auto copy = [&](const std::string& name, const GgufTensorInfo& t) {
        w.add_tensor(name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    };
    for (const GgufTensorInfo& t : f->tensors()) copy(t.name, t);
    if (!extra.empty()) copy(extra, *f->find_tensor("blk.3.attn_q.weight"));
    const std::string path = tmp.file("qwen35-interval" + std::to_string(interval) + ".gguf");
    w.write(path);
    return path;
}

size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

TEST(LoadWarnings, WrongIntervalWarnsOnceAndEvaluatesLikeTheOriginal) {
    EMBER_REQUIRE_FIXTURE(kQwen35);
    TempDir tmp;
    const std::string modified = modified_qwen35(tmp, 2);
    const std::string ids = "785,3974,13876,38835,34208,916,279,15678,5562,13";
    const auto original =
        run_command({ember_binary(), "eval", "-m", fixture_path(kQwen35), "--ids", ids, "-t", "2"});
    const auto fixed =
        run_command({ember_binary(), "eval", "-m", modified, "--ids", ids, "-t", "2"});
    ASSERT_EQ(original.status, 0) << original.err;
    ASSERT_EQ(fixed.status, 0) << fixed.err;
    EXPECT_EQ(count(original.err, "warning"), 0u) << original.err;
    EXPECT_EQ(count(fixed.err, "ember: warning: "), 1u) << fixed.err;
    EXPECT_NE(fixed.err.find("makes layers 1, 3 attention, but the tensors make layers 3 "
                             "attention"),
              std::string::npos)
        << fixed.err;
    EXPECT_EQ(split_lines(fixed.out).size(), 10u);
    EXPECT_EQ(fixed.out, original.out);  // top logits of every position, as printed
}

TEST(LoadWarnings, LayerWithBothKindsOfTensorsIsOneClearError) {
    EMBER_REQUIRE_FIXTURE(kQwen35);
    TempDir tmp;
    const std::string bad = modified_qwen35(tmp, 2, "blk.1.attn_q.weight");
    const auto r = run_command({ember_binary(), "eval", "-m", bad, "--ids", "1,2"});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "ember: error: " + bad +
                         ": layer 1 has both attention and recurrent tensors, so its kind is "
                         "ambiguous\n");
}

TEST(LoadWarnings, TensorDecodeOnTheCpuSaysItChangesNothing) {
    EMBER_REQUIRE_FIXTURE(kLlama);
    const std::vector<std::string> eval = {ember_binary(), "eval",  "-m",    fixture_path(kLlama),
                                           "--ids",        "1,2,3", "--gpu", "off"};
    auto with_flag = eval;
    with_flag.push_back("--tensor-decode");
    const auto plain = run_command(eval);
    const auto flagged = run_command(with_flag);
    ASSERT_EQ(plain.status, 0) << plain.err;
    ASSERT_EQ(flagged.status, 0) << flagged.err;
    EXPECT_EQ(plain.err.find("--tensor-decode"), std::string::npos) << plain.err;
    EXPECT_EQ(
        count(flagged.err,
              "ember: note: --tensor-decode changes nothing here: the model runs on the CPU\n"),
        1u)
        << flagged.err;
    EXPECT_EQ(flagged.out, plain.out);  // the same logits either way
}

// serve with several slots takes the tensor-core decode products by default; on the CPU that
// default is not the user's flag, so nothing is said about it. The two flags together are a
// usage error naming both.
TEST(GpuOptionNotes, ServesDefaultSaysNothingOnTheCpuAndTheTwoFlagsExcludeEachOther) {
    EMBER_REQUIRE_FIXTURE(kLlama);
    const TempDir tmp;
    {
        ServeProcess serve(
            std::vector<std::string>{"-m", fixture_path(kLlama), "--gpu", "off", "--parallel", "4"},
            tmp.file("serve.log"));
        ASSERT_GT(serve.port(), 0) << serve.process().log();
        EXPECT_EQ(serve.process().log().find("tensor-decode"), std::string::npos)
            << serve.process().log();
    }
    const auto both = run_command(
        std::vector<std::string>{ember_binary(), "eval", "-m", fixture_path(kLlama), "--ids",
                                 "1,2,3", "--gpu", "off", "--tensor-decode", "--no-tensor-decode"});
    EXPECT_NE(both.status, 0);
    EXPECT_NE(both.err.find("--tensor-decode"), std::string::npos) << both.err;
    EXPECT_NE(both.err.find("--no-tensor-decode"), std::string::npos) << both.err;
    EXPECT_EQ(both.out, "");
}

}  // namespace
}  // namespace ember::test
