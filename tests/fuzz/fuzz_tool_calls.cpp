// libFuzzer target for the tool-call parser (engine/generate/tool_call_parser.cpp): a model's
// reply is untrusted text, and a server streams it through ToolCallParser. The first byte
// picks the format (Hermes, Llama3, Gemma3: the text formats) and whether the offered
// functions are a fixed list or any name; the rest is the reply. The parser documents no
// error: every input splits into content and calls (malformed calls become content with a
// warning), and the result does not depend on how the text is split as it streams, which is
// checked here by feeding it again in pieces whose lengths come from the input.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "engine/generate/tool_calls.h"

namespace {

void check(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "fuzz_tool_calls: %s\n", what);
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace ember;
    if (size == 0) return 0;
    static const ToolCallFormat kFormats[] = {ToolCallFormat::Hermes, ToolCallFormat::Llama3,
                                              ToolCallFormat::Gemma3};
    const ToolCallFormat format = kFormats[(data[0] & 3) % 3];
    ToolCallParser::Options options;
    if (data[0] & 4) options.names = {"get_weather", "add"};
    if (data[0] & 8) options.max_calls = 1;
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

    const ParsedReply whole = parse_tool_calls(format, text, options);

    // The same reply streamed in pieces of 1..16 bytes, the lengths read from the reply's own
    // bytes (so each input picks its own split).
    std::string streamed_content;
    std::vector<ToolCallDelta> deltas;
    ToolCallParser parser(
        format, options,
        [&](const std::string& piece) {
            streamed_content += piece;
            return true;
        },
        [&](const ToolCallDelta& delta) {
            deltas.push_back(delta);
            return true;
        });
    for (size_t at = 0; at < text.size();) {
        const size_t piece = 1 + static_cast<unsigned char>(text[at]) % 16;
        parser.push(text.substr(at, piece));
        at += piece;
    }
    parser.finish();

    check(parser.content() == whole.content, "streamed content differs from the whole reply's");
    check(streamed_content == whole.content, "content passed on differs from content()");
    check(parser.calls().size() == whole.calls.size(), "streamed calls differ in number");
    for (size_t i = 0; i < whole.calls.size(); ++i) {
        // Ids are random per call; the name and the arguments are the reply's.
        check(parser.calls()[i].name == whole.calls[i].name, "a streamed call's name differs");
        check(parser.calls()[i].arguments == whole.calls[i].arguments,
              "a streamed call's arguments differ");
    }
    check(options.max_calls == SIZE_MAX || whole.calls.size() <= options.max_calls,
          "more calls than max_calls");
    // The deltas rebuild each call: the first names it, the rest are its arguments' text.
    std::vector<std::string> rebuilt(whole.calls.size());
    for (const ToolCallDelta& d : deltas) {
        check(d.index < rebuilt.size(), "a delta names a call that is not in calls()");
        rebuilt[d.index] += d.arguments;
    }
    return 0;
}
