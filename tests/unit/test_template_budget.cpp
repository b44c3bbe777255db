// A chat template comes from whoever made the GGUF file, so a render must end, within bounded
// memory, whatever the template does: runaway loops stop at the step budget, runaway strings
// at the text budget, and deep values (variables or built by the template) end in an error
// instead of a stack overflow. Ordinary templates must not notice any of it.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/template/template.h"
#include "tests/support/sanitizers.h"

namespace ember {
namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

ojson one_message(const std::string& content = "hi") {
    ojson vars = ojson::object();
    vars["messages"] = ojson::array({{{"role", "user"}, {"content", content}}});
    return vars;
}

// The message of the error rendering `source` raises; empty when it renders.
std::string render_error(std::string_view source, const ojson& vars = one_message()) {
    try {
        ChatTemplate(source).render_variables(vars);
    } catch (const TemplateError& e) {
        return e.what();
    }
    return {};
}

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// Peak resident memory of this process in MiB.
long peak_rss_mib() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss / 1024;  // KiB on Linux
}

TEST(TemplateBudget, NestedRangeLoopsStopAtTheStepBudget) {
    const auto start = Clock::now();
    const std::string err = render_error(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
    EXPECT_NE(err.find("exceeded the budget of 10,000,000 evaluation steps"), std::string::npos)
        << err;
    EXPECT_LT(seconds_since(start), test::time_limit(10.0));
}

TEST(TemplateBudget, LoopsWithBodiesStopToo) {
    const std::string err = render_error(
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ i + j }}{% endfor %}"
        "{% endfor %}");
    EXPECT_NE(err.find("evaluation steps"), std::string::npos) << err;
}

TEST(TemplateBudget, RecursiveMacroLoopsStop) {
    // Depth is capped separately; each level here loops, so only the step budget ends it.
    const std::string err = render_error(
        "{% macro f(n) %}{% for i in range(100) %}{{ f(n + 1) if n < 50 }}{% endfor %}"
        "{% endmacro %}{{ f(0) }}");
    EXPECT_NE(err.find("evaluation steps"), std::string::npos) << err;
}

TEST(TemplateBudget, DoublingAStringStopsAtTheTextBudget) {
    const long rss_before = peak_rss_mib();
    const std::string err = render_error(
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}{{ ns.s | length }}");
    EXPECT_NE(err.find("MiB of text"), std::string::npos) << err;
    EXPECT_NE(err.find("exceeded the budget of 6"), std::string::npos) << err;  // 64-65 MiB
    // The strings built before the limit (64 MiB at most at once, plus copies in flight).
    if (test::kMemoryLimitsHold) {
        EXPECT_LT(peak_rss_mib() - rss_before, 400) << "peak RSS grew too much";
    }
}

TEST(TemplateBudget, EveryStringBuilderIsCounted) {
    const char* const runaways[] = {
        // + on strings
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
        "{% endfor %}",
        // * on strings, in small steps that each stay under the per-string limit
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s * 2 %}"
        "{% endfor %}",
        // join filter and str.join
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
        "{% set ns.s = [ns.s, ns.s] | join %}{% endfor %}",
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
        "{% set ns.s = ''.join([ns.s, ns.s]) %}{% endfor %}",
        // replace filter and str.replace: every 'a' becomes 'aa'
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
        "{% set ns.s = ns.s | replace('a', 'aa') %}{% endfor %}",
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
        "{% set ns.s = ns.s.replace('b', 'bb') %}{% endfor %}",
        // printing the same 1 MiB string over and over
        "{% set s = 'x' * 1048576 %}{% for i in range(1000) %}{{ s }}{% endfor %}",
        // a list of copies of a big string
        "{% set s = 'x' * 1048576 %}{% set l = [s] * 1000 %}",
        // one replace that would multiply a 1 MiB string by 1000 in one go
        "{% set s = 'a' * 1048576 %}{{ s | replace('a', 'b' * 1000) }}",
        // indent with a huge indent on many lines
        "{% set s = '\\n' * 100000 ~ 'x' %}{{ s | indent('y' * 10000) }}",
    };
    for (const char* source : runaways) {
        const auto start = Clock::now();
        const std::string err = render_error(source);
        EXPECT_TRUE(err.find("MiB of text") != std::string::npos ||
                    err.find("result too large") != std::string::npos)
            << source << "\n -> " << err;
        EXPECT_LT(seconds_since(start), test::time_limit(10.0)) << source;
    }
}

TEST(TemplateBudget, TextBudgetGrowsWithTheInput) {
    // A 4 MiB message referenced and printed several times is ordinary, not runaway.
    const std::string content(4 << 20, 'x');
    const std::string out = ChatTemplate(
                                "{% for m in messages %}{% if '<think>' in m.content %}{% endif %}"
                                "{{ m.content | trim }}{{ m.content.split('</think>')[-1] }}"
                                "{{ m['content'] }}{{ m.content ~ '' }}{% endfor %}")
                                .render_variables(one_message(content));
    EXPECT_EQ(out.size(), 4 * content.size());
}

TEST(TemplateBudget, ErrorsNameTheLine) {
    const std::string err = render_error(
        "line one\n{% for i in range(100000) %}"
        "{% for j in range(100000) %}{% endfor %}{% endfor %}");
    EXPECT_NE(err.find("at line 2"), std::string::npos) << err;
}

// Nested JSON: `depth` arrays, each holding the next.
ojson nested_arrays(int depth) {
    return ojson::parse(std::string(static_cast<size_t>(depth), '[') +
                        std::string(static_cast<size_t>(depth), ']'));
}

TEST(TemplateBudget, DeepVariablesAreRefusedNotRecursedInto) {
    ojson vars = one_message();
    vars["x"] = nested_arrays(kMaxTemplateValueDepth);
    EXPECT_EQ(render_error("{{ x | tojson | length }}", vars), "");
    vars["x"] = nested_arrays(kMaxTemplateValueDepth + 1);
    const std::string err = render_error("{{ x }}", vars);
    EXPECT_NE(err.find("nested deeper than 512 levels"), std::string::npos) << err;
}

TEST(TemplateBudget, DeepValuesBuiltByATemplateEndInAnError) {
    const std::string build =
        "{% set ns = namespace(x=1) %}{% for i in range(2) %}{% for j in range(100000) %}"
        "{% set ns.x = [ns.x] %}{% endfor %}{% endfor %}";
    // Building and dropping a 200,000-deep list: destroyed without deep recursion.
    EXPECT_EQ(render_error(build + "done"), "");
    for (const char* use :
         {"{{ ns.x }}", "{{ ns.x | tojson }}", "{{ ns.x == ns.x }}", "{{ ns.x < [ns.x] }}"}) {
        const std::string err = render_error(build + use);
        EXPECT_NE(err.find("nested deeper than 512 levels"), std::string::npos)
            << use << " -> " << err;
    }
}

TEST(TemplateBudget, SelfContainingNamespaceEndsInAnError) {
    const std::string err =
        render_error("{% set ns = namespace(x=1) %}{% set ns.x = [ns, ns] %}{{ ns }}");
    EXPECT_NE(err.find("nested deeper than 512 levels"), std::string::npos) << err;
}

// A cycle of containers (a namespace holding a list holding the namespace) would keep itself
// alive by its own shared_ptrs; the render empties the namespaces it assigned to when it ends.
// Without that, each render here leaks its 1 MiB string: 100 MiB over the loop. (Under the
// sanitizers LeakSanitizer checks the same at exit, .ci/lsan.supp having no entry for it.)
TEST(TemplateBudget, CyclesATemplateMakesAreFreedWhenTheRenderEnds) {
    const std::string source =
        "{% set ns = namespace(x=1) %}{% set ns.x = [ns, 'y' * 1048576] %}{{ ns.x | length }}";
    const long rss_before = peak_rss_mib();
    for (int i = 0; i < 100; ++i) {
        EXPECT_EQ(ChatTemplate(source).render_variables(one_message()), "2");
    }
    // One render's megabytes at a time, plus the allocator's slack.
    if (test::kMemoryLimitsHold) {
        EXPECT_LT(peak_rss_mib() - rss_before, 40) << "the cycles were not freed";
    }
    // The same when the render ends in an error.
    const std::string failing = source + "{{ raise_exception('stop') }}";
    for (int i = 0; i < 100; ++i) EXPECT_EQ(render_error(failing), "stop");
    if (test::kMemoryLimitsHold) {
        EXPECT_LT(peak_rss_mib() - rss_before, 40) << "the cycles of failed renders were not freed";
    }
}

TEST(TemplateBudget, OrdinaryTemplateIsFast) {
    // A long conversation through a typical template: far inside both budgets.
    ojson vars = ojson::object();
    vars["messages"] = ojson::array();
    for (int i = 0; i < 2000; ++i) {
        vars["messages"].push_back(
            {{"role", i % 2 ? "assistant" : "user"}, {"content", std::string(500, 'a' + i % 26)}});
    }
    vars["add_generation_prompt"] = true;
    const auto start = Clock::now();
    const std::string out =
        ChatTemplate(
            "{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
            "{%- if message.role == 'assistant' and '</think>' in message.content %}"
            "{{ message.content.split('</think>')[-1].lstrip('\\n') }}{%- else %}"
            "{{ message.content | trim }}{%- endif %}{{ '<|im_end|>\\n' }}{%- endfor %}"
            "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}")
            .render_variables(vars);
    EXPECT_GT(out.size(), 2000u * 500u);
    EXPECT_LT(seconds_since(start), test::time_limit(2.0));
}

std::string repeated(std::string_view piece, int times) {
    std::string out;
    for (int i = 0; i < times; ++i) out += piece;
    return out;
}

// Found by tests/fuzz (fuzz_template): nesting, and chains the parser builds in a loop (each
// link one level deeper in the tree that checks, rendering and destruction walk), overflowed
// the stack. Both now count against one bound, named in the error.
TEST(TemplateBudget, DeepNestingAndLongChainsAreRefusedNamingTheBound) {
    const std::vector<std::string> hostile = {
        repeated("{% if true %}", 20000) + "x" + repeated("{% endif %}", 20000),
        "{{ 1" + repeated("+1", 50000) + " }}",
        "{{ x" + repeated("|trim", 50000) + " }}",
        "{{ a" + repeated(".b", 50000) + " }}",
        "{{ " + repeated("(", 50000) + "1" + repeated(")", 50000) + " }}",
    };
    for (const std::string& source : hostile) {
        const std::string err = render_error(source);
        EXPECT_NE(err.find("template nests deeper than 256 levels"), std::string::npos)
            << source.substr(0, 40) << ": " << err;
    }
    // Real templates are far from it.
    EXPECT_EQ(render_error(repeated("{% if true %}", 40) + "x" + repeated("{% endif %}", 40)), "");
    EXPECT_EQ(render_error("{{ 1" + repeated(" + 1", 100) + " }}"), "");
}

}  // namespace
}  // namespace ember
