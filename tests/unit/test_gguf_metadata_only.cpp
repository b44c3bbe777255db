// GgufFile::open_metadata and load_tokenizer: the metadata and tensor table of a file read
// without mapping it (tokenizing needs no weights), the same as open() reads them, with the
// same errors for damaged files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/fixtures.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

// Whether the process has a mapping of `path` (/proc/self/maps names mapped files).
bool mapped(const std::string& path) {
    std::ifstream maps("/proc/self/maps");
    const std::string canonical = fs::canonical(path).string();
    std::string line;
    while (std::getline(maps, line)) {
        if (line.size() >= canonical.size() &&
            line.compare(line.size() - canonical.size(), canonical.size(), canonical) == 0) {
            return true;
        }
    }
    return false;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(GgufMetadataOnly, SameTableAsTheMappedFileAndNoMapping) {
    const std::string rel = "arch/qwen3/qwen3.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    const std::string path = fixture_path(rel);
    const auto header = GgufFile::open_metadata(path);
    EXPECT_FALSE(mapped(path)) << "open_metadata mapped the file";
    EXPECT_EQ(header->file_data(), nullptr);
    const auto full = GgufFile::open(path);
    EXPECT_TRUE(mapped(path));  // the check above can see a mapping
    EXPECT_EQ(header->version(), full->version());
    EXPECT_EQ(header->file_size(), full->file_size());
    EXPECT_EQ(header->metadata_order(), full->metadata_order());
    ASSERT_EQ(header->tensors().size(), full->tensors().size());
    for (size_t i = 0; i < full->tensors().size(); ++i) {
        const GgufTensorInfo& a = header->tensors()[i];
        const GgufTensorInfo& b = full->tensors()[i];
        EXPECT_EQ(a.name, b.name);
        EXPECT_EQ(a.dims, b.dims);
        EXPECT_EQ(a.type, b.type);
        EXPECT_EQ(a.offset, b.offset);
        EXPECT_EQ(a.n_bytes, b.n_bytes);
        EXPECT_EQ(a.data, nullptr) << a.name;
    }
    const GgufArray* ta = header->get_array("tokenizer.ggml.tokens");
    const GgufArray* tb = full->get_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(ta && tb);
    EXPECT_EQ(ta->strings, tb->strings);
}

TEST(GgufMetadataOnly, LoadTokenizerMapsNothingAndEncodesAsTheModelDoes) {
    const std::string rel = "arch/qwen3/qwen3.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    const std::string path = fixture_path(rel);
    const Tokenizer tok = load_tokenizer(path);
    EXPECT_FALSE(mapped(path));
    const auto model = Model::load(path);
    const std::string text = "Hello, world! 12345 naïve  café\n<|im_start|>user";
    EXPECT_EQ(tok.encode(text, {.parse_special = true}),
              model->tokenizer().encode(text, {.parse_special = true}));
    EXPECT_EQ(tok.vocab_size(), model->tokenizer().vocab_size());
}

TEST(GgufMetadataOnly, VocabularyOnlyFileLoadsAsATokenizerButNotAsAModel) {
    const std::string rel = "tokenizers/ggml-vocab-llama-spm.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    const std::string path = fixture_path(rel);
    const Tokenizer tok = load_tokenizer(path);
    EXPECT_EQ(tok.vocab_size(), 32000u);  // Llama 2's SentencePiece vocabulary
    const std::string msg = error_of([&] { Model::load(path); });
    EXPECT_NE(msg.find(path + ": the file has no tensors"), std::string::npos) << msg;
}

// A file cut short gives open_metadata the error open gives: in the vocabulary (named with
// its index), or in the tensor data (metadata fine, a tensor outside the file).
TEST(GgufMetadataOnly, TruncatedFilesGiveTheSameErrors) {
    const std::string rel = "arch/qwen3/qwen3.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    TempDir tmp;
    const std::string src = fixture_path(rel);
    const auto full = GgufFile::open(src);
    const uint64_t data_start =
        static_cast<uint64_t>(full->tensors().front().data - full->file_data()) -
        full->tensors().front().offset;
    for (const uint64_t keep : {uint64_t{100000}, data_start + 1000}) {
        SCOPED_TRACE(keep);
        const std::string cut = tmp.file("cut.gguf");
        fs::copy_file(src, cut, fs::copy_options::overwrite_existing);
        fs::resize_file(cut, keep);
        const std::string a = error_of([&] { GgufFile::open_metadata(cut); });
        const std::string b = error_of([&] { GgufFile::open(cut); });
        EXPECT_EQ(a, b);
        EXPECT_NE(a.find(cut + ": "), std::string::npos) << a;
        EXPECT_NE(a.find(keep < data_start ? "'tokenizer.ggml.tokens'" : "outside the file"),
                  std::string::npos)
            << a;
    }
}

}  // namespace
}  // namespace ember::test
