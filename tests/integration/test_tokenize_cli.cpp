// `ember tokenize`, `detokenize` and `info` on vocabulary-only GGUFs (no tensors): every
// tokenizers/ggml-vocab-*.gguf that has an .inp/.out pair must tokenize through the real binary
// exactly as its .out file says (ids from HF tokenizers), and decode back to its text.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/vocab_cases.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Every vocabulary GGUF of the fixtures that comes with its .inp/.out pair.
std::vector<std::string> vocab_files_with_pairs() {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(fixture_path("tokenizers"))) {
        const std::string name = e.path().filename().string();
        if (name.rfind("ggml-vocab-", 0) != 0 || e.path().extension() != ".gguf") continue;
        if (fs::exists(e.path().string() + ".inp") && fs::exists(e.path().string() + ".out")) {
            files.push_back(e.path().string());
        }
    }
    std::sort(files.begin(), files.end());
    return files;
}

std::string ids_str(const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ' ';
        s += std::to_string(ids[i]);
    }
    return s;
}

std::string shown(const std::string& s) {
    return json(s).dump();
}

TEST(TokenizeCli, EveryVocabularyPairThroughTheBinary) {
    EMBER_REQUIRE_FIXTURE("tokenizers");
    const std::vector<std::string> files = vocab_files_with_pairs();
    // The six vocabularies the fixtures ship with their GGUF: fewer means a broken checkout.
    ASSERT_GE(files.size(), 6u);
    for (const std::string& gguf : files) {
        SCOPED_TRACE(gguf);
        const std::vector<VocabCase> cases = read_vocab_cases(gguf);
        ASSERT_FALSE(cases.empty());
        size_t ok = 0;
        for (const VocabCase& c : cases) {
            // "--" ends the options: several strings start with '-'.
            const CommandResult r =
                run_command({ember_binary(), "tokenize", "-m", gguf, "--", c.text});
            if (r.status != 0) {
                ADD_FAILURE() << shown(c.text) << ": exit " << r.status << ": " << r.err;
                continue;
            }
            std::vector<int32_t> got;
            try {
                got = json::parse(r.out).get<std::vector<int32_t>>();
            } catch (const std::exception& e) {
                ADD_FAILURE() << shown(c.text) << ": output is not a JSON id array: " << r.out;
                continue;
            }
            if (got == c.ids) {
                ++ok;
            } else {
                ADD_FAILURE() << shown(c.text) << "\n  expected: " << ids_str(c.ids)
                              << "\n  got:      " << ids_str(got);
            }
        }
        EXPECT_EQ(ok, cases.size());
        std::cout << "[ tokenize ] " << fs::path(gguf).filename().string() << ": " << ok << "/"
                  << cases.size() << "\n";
    }
}

// The ids of every non-empty string decode back to the string (SPM's added leading space
// taken off again). One process per string, so only every third string: the decoding itself
// is checked on all of them by test_tokenizer_fixtures.
TEST(TokenizeCli, DetokenizeGivesTheTextBack) {
    EMBER_REQUIRE_FIXTURE("tokenizers");
    for (const std::string& gguf : vocab_files_with_pairs()) {
        SCOPED_TRACE(gguf);
        const std::vector<VocabCase> cases = read_vocab_cases(gguf);
        for (size_t i = 1; i < cases.size(); i += 3) {
            const VocabCase& c = cases[i];
            if (c.ids.empty()) continue;
            std::string ids;
            for (int32_t id : c.ids) {
                if (!ids.empty()) ids += ',';
                ids += std::to_string(id);
            }
            const CommandResult r = run_command({ember_binary(), "detokenize", "-m", gguf, ids});
            ASSERT_EQ(r.status, 0) << r.err;
            EXPECT_EQ(shown(r.out), shown(c.text + "\n")) << ids;
        }
    }
}

TEST(TokenizeCli, InfoOnAVocabularyOnlyFileSaysItHasNoWeights) {
    const std::string rel = "tokenizers/ggml-vocab-gpt-2.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    const CommandResult r = run_command({ember_binary(), "info", "-m", fixture_path(rel)});
    ASSERT_EQ(r.status, 0) << r.err;
    // GPT-2's published vocabulary: 50,257 tokens, byte-level BPE.
    EXPECT_NE(r.out.find("vocab:         50257 (gpt2 tokenizer, pre 'gpt-2')"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("weights:       none"), std::string::npos) << r.out;
    EXPECT_EQ(r.err, "");
}

// A model that needs weights says so, naming the file, instead of failing on a tensor name.
TEST(TokenizeCli, RunOnAVocabularyOnlyFileIsAClearError) {
    const std::string rel = "tokenizers/ggml-vocab-llama-spm.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    const CommandResult r =
        run_command({ember_binary(), "run", "-m", fixture_path(rel), "-p", "Hi", "-n", "1"});
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find(fixture_path(rel)), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("no tensors"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ember::test
