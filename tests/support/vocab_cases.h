// llama.cpp's vocabulary test pairs (tokenizers/ggml-vocab-<family>.gguf.inp/.out, generated
// with HF tokenizers): the strings and the ids each must tokenize to (no BOS, special-token
// text not parsed).
//
// .inp: every string followed by a line "__ggml_vocab_test__" (strings may span lines and may
// be empty). .out: one line per string, the ids separated by spaces (written with a leading
// space: " 15496 995"); an empty line for the empty string.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/fixtures.h"

namespace ember::test {

struct VocabCase {
    std::string text;
    std::vector<int32_t> ids;
};

// Reads base + ".inp" and base + ".out"; a count mismatch is a test failure.
inline std::vector<VocabCase> read_vocab_cases(const std::string& base) {
    const std::string inp = read_file(base + ".inp");
    const std::string out = read_file(base + ".out");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    size_t pos = 0;
    while (true) {
        const size_t at = inp.find(sep, pos);
        if (at == std::string::npos) {
            if (pos < inp.size()) texts.push_back(inp.substr(pos));
            break;
        }
        texts.push_back(inp.substr(pos, at - pos));
        pos = at + sep.size();
    }
    std::vector<std::vector<int32_t>> expected;
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream ls(line);
        std::vector<int32_t> ids;
        int32_t id = 0;
        while (ls >> id) ids.push_back(id);
        expected.push_back(std::move(ids));
    }
    EXPECT_EQ(texts.size(), expected.size()) << base;
    std::vector<VocabCase> cases;
    for (size_t i = 0; i < texts.size() && i < expected.size(); ++i) {
        cases.push_back({texts[i], expected[i]});
    }
    return cases;
}

}  // namespace ember::test
