// The Jinja subset of chat templates, feature by feature. Expected outputs are what jinja2
// 3.1 renders when configured the way HF transformers configures it (trim_blocks,
// lstrip_blocks, loop controls, immutable sandbox, json.dumps as tojson); the fixture suite
// (test_chat_template_fixtures.cpp) covers whole real templates.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/template/template.h"

namespace ember {
namespace {

constexpr TemplateTime kDate{2026, 11, 21, 12, 0, 0};

// The variables every table case renders with. `u` is deliberately left undefined.
nlohmann::ordered_json variables() {
    return nlohmann::ordered_json::parse(R"({
        "d": {"a": 1, "b": [1, 2]},
        "l": [3, 1, 2],
        "s": "h\u00e9llo",
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Hi"}]
    })");
}

std::string render(std::string_view source,
                   const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
    return ChatTemplate(source).render_variables(vars, kDate);
}

// The error rendering `source` raises, or nullopt when it renders.
std::optional<TemplateError> render_error(
    std::string_view source,
    const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
    try {
        render(source, vars);
    } catch (const TemplateError& e) {
        return e;
    }
    return std::nullopt;
}

struct TemplateCase {
    const char* source;
    const char* expected;
};

template <std::size_t N>
void expect_cases(const TemplateCase (&cases)[N]) {
    const auto vars = variables();
    for (const auto& c : cases) {
        SCOPED_TRACE(c.source);
        try {
            EXPECT_EQ(render(c.source, vars), c.expected);
        } catch (const TemplateError& e) {
            ADD_FAILURE() << "threw: " << e.what();
        }
    }
}

// clang-format off
const TemplateCase kWhitespaceCases[] = {
    {"  {% if true %}\n    a\n  {% endif %}\nb",
     "    a\nb"},
    {"  {%+ if true %}\n    a\n  {% endif +%}\nb",
     "      a\n\nb"},
    {"x  {% if true %}y{% endif %}  z",
     "x  y  z"},
    {"{{ 1 }}\n  {% if true %}y{% endif %}",
     "1\ny"},
    {"a\n  {# comment #}\nb",
     "a\nb"},
    {"a {#- c -#}  b",
     "ab"},
    {"a\n{%- if true -%}\n  b\n{%- endif -%}\n  c",
     "abc"},
    {"a {{- 1 -}} b {{ 2 }} c",
     "a1b 2 c"},
    {"{% for i in [1,2] %}\n  - {{ i }}\n{% endfor %}",
     "  - 1\n  - 2\n"},
    {"\t{% if true %}tab{% endif %}",
     "tab"},
    {"{%- for i in [1, 2] -%}\n{{ i }}\n{%- endfor %}\nend",
     "12end"},
    {"{% raw %}{{ not parsed }}{% endraw %}",
     "{{ not parsed }}"},
    {"  {%- raw %} x {% endraw -%}   y",
     " x y"},
    {"trailing newline\n",
     "trailing newline"},
    {"crlf\r\nline\r\n{% if true %}\r\nx{% endif %}",
     "crlf\nline\nx"},
    {" {% if true -%}\n   a\n {%- endif %}",
     "a"},
};

const TemplateCase kLiteralsCases[] = {
    {"{{ 'a\\tb\\x41\\u00e9\\n\\d' }}|{{ \"it's\" }}|{{ 'x' 'y' }}",
     "a\tbAé\n\\d|it's|xy"},
    {"{{ 42 }} {{ 1_000 }} {{ 0x1F }} {{ 1.5e3 }} {{ 2.50 }} {{ -3 }}",
     "42 1000 31 1500.0 2.5 -3"},
    {"{{ true }} {{ False }} {{ none }} {{ None }}",
     "True False None None"},
    {"{{ [1, 'a', \"it's\", none, true, 1.5] }} {{ (1, 2) }} {{ (1,) }} {{ () }} {{ {'k': [1, {'n': none}]} }}",
     "[1, 'a', \"it's\", None, True, 1.5] (1, 2) (1,) () {'k': [1, {'n': None}]}"},
    {"{{ 3.0 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }} {{ 0.1 + 0.2 }} {{ 1/3 }}",
     "3.0 1e+16 1000000000000000.0 0.0001 1e-05 -0.0 0.30000000000000004 0.3333333333333333"},
};

const TemplateCase kOperatorsCases[] = {
    {"{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }}",
     "7 9 64 4 3 -4 2 3.5 2.0"},
    {"{{ 'ab' ~ 1 ~ none ~ u }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ 'ab' * 2 }} {{ true + 1 }}",
     "ab1None ab [1, 2] abab 2"},
    {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ [1, 2] == [1, 2] }} {{ {'a': 1} == {'a': 1} }}",
     "True False True True True True"},
    {"{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'a' in d }} {{ 'z' not in d }} {{ 'a' in u }}",
     "True True True True False"},
    {"{{ 0 or 'x' }} {{ 1 and 'y' }} {{ none or [] }} {{ not 0 }} {{ not 1 == 2 }}",
     "x y [] True True"},
    {"{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'yes' if 0 }}] {{ (1 if 0) is defined }}",
     "yes no [] False"},
};

const TemplateCase kAccessCases[] = {
    {"{{ d.a }} {{ d['b'][1] }} {{ d.b.0 }} {{ l[-1] }} {{ s[1] }} {{ messages[0].role }} {{ messages[1]['content'] }}",
     "1 2 1 2 é system Hi"},
    {"[{{ d.missing }}] [{{ l[10] }}] {{ d.missing is defined }} {{ l[10] is defined }} [{{ none.x }}]",
     "[] [] False False []"},
    {"{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[5:] }} {{ s[::-1] }} {{ s[1:3] }} {{ (1, 2, 3)[1:] }}",
     "[1, 2] [3, 1] [2, 1, 3] [3, 2] [1, 2] [] olléh él (2, 3)"},
    {"{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 5) }} {{ d.keys()|list }} {{ d.values()|list }} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
     "1 None 5 ['a', 'b'] [1, [1, 2]] a=1;b=[1, 2];"},
};

const TemplateCase kUndefinedCases[] = {
    {"[{{ u }}] {{ u is defined }} {{ u is undefined }} {{ u is none }} {{ u|length }} [{{ u|trim }}] {{ u == u }} {{ not u }}",
     "[] False True False 0 [] True True"},
    {"[{% for x in u %}{{ x }}{% endfor %}] {{ u|default('dflt') }} {{ u|list }} {{ u is iterable }}",
     "[] dflt [] True"},
};

const TemplateCase kLoopsCases[] = {
    {"{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
     "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;"},
    {"{% for x in l %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}",
     "[|1][3|2][1|]"},
    {"{% for x in [] %}a{% else %}empty{% endfor %}",
     "empty"},
    {"{% for x in [1, 2, 3, 4] if x is even %}{{ loop.index }}/{{ loop.length }}:{{ x }} {% endfor %}",
     "1/2:2 2/2:4 "},
    {"{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% if i == 3 %}{% break %}{% endif %}{% endfor %}",
     "023"},
    {"{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %} {% for (k, v) in d|items %}{{ k }}{% endfor %}",
     "37 ab"},
    {"{% for a in [[1, 2], [3]] %}{% for b in a %}{{ loop.index }}{{ b }}{% endfor %}|{{ loop.index }};{% endfor %}",
     "1122|1;13|2;"},
    {"{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i + 10 %}{{ x }};{% endfor %}{{ x }}",
     "111;112;1"},
    {"{% for k in d %}{{ k }}{% endfor %} {% for c in s %}{{ c }}.{% endfor %}",
     "ab h.é.l.l.o."},
    {"{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{% endfor %}",
     "aba"},
    {"{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}[{{ x }}]{% endif %}{% endfor %}",
     "[1][2][1]"},
    // `loop` is built when first read (template_interp.h, LoopSource): the inner loop's, then
    // the outer one's again (jinja2 3.1 renders this).
    {"{% for x in [1,2] %}{% for y in [3,4,5] %}{{ loop.index }}{{ loop.revindex }}{% endfor %}{{ loop.last }}{% endfor %}",
     "132231False132231True"},
};

const TemplateCase kAssignmentCases[] = {
    {"{% if true %}{% set z = 3 %}{% endif %}{{ z }}",
     "3"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}",
     "12"},
    {"{% set t %}  hi {{ 1 }}{% endset %}[{{ t }}]",
     "[  hi 1]"},
    {"{% set t | upper %}abc{% endset %}{{ t }}",
     "ABC"},
    {"{% set ns = namespace(a=1) %}{% set ns.b = 2 %}{% for i in [1, 2] %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}",
     "42"},
    {"{% for x in [1] %}{% set inner = 1 %}{% endfor %}[{{ inner }}]",
     "[]"},
    {"{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
     "3[]"},
    {"{% filter upper %}abc{{ 'd' }}{% endfilter %}",
     "ABCD"},
};

const TemplateCase kMacrosCases[] = {
    {"{% macro m(a, b=a * 2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(3) }} {{ m(3, b=1) }} {{ m(b=4, a=1) }}",
     "3-6 3-1 1-4"},
    {"{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}",
     "[]"},
    {"{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, z=4) }}",
     "1(2, 3){'z': 4}"},
    {"{% macro f(n) %}{% if n > 0 %}{{ n }},{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(4) }}",
     "4,3,2,1,"},
    {"{% macro m() %}{{ x }}{% endmacro %}{% set x = 5 %}{{ m() }}",
     "5"},
    {"{% set ns = namespace(c=0) %}{% macro inc() %}{% set ns.c = ns.c + 1 %}{% endmacro %}{{ inc() }}{{ inc() }}{{ ns.c }}",
     "2"},
    {"{% macro m() %}{% set x = 5 %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}{{ x }}",
     "51"},
    {"{% macro wrap(tag) %}<{{ tag }}>{{ caller(tag) }}</{{ tag }}>{% endmacro %}{% call(t) wrap('b') %}inside {{ t }}{% endcall %}",
     "<b>inside b</b>"},
    {"{% macro m(x) %}  {{ x }}  {% endmacro %}[{{ m(1)|trim }}]",
     "[1]"},
};

const TemplateCase kFiltersCases[] = {
    {"{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'abc'|length }}|{{ s|length }}|{{ l|length }}|{{ d|count }}",
     "a b|a|3|5|3|2"},
    {"{{ 'hello world-foo'|title }}|{{ 'hELLO wORLD'|capitalize }}|{{ s|upper }}|{{ 'ABC'|lower }}",
     "Hello World-Foo|Hello world|HÉLLO|abc"},
    {"{{ u|default('x') }}|{{ ''|default('y', true) }}|{{ none|default('z') }}|{{ 0|d(5) }}",
     "x|y|None|0"},
    {"{{ [1, 2]|join }}|{{ ['a', 'b']|join(', ') }}|{{ messages|map(attribute='role')|join('/') }}",
     "12|a, b|system/user"},
    {"{{ l|first }} {{ l|last }} {{ 'abc'|first }} {{ []|first is defined }} {{ d|first }}",
     "3 2 a False a"},
    {"{{ l|list }} {{ 'ab'|list }} {{ d|list }} {{ d|items|list }} {{ l|reverse|list }} {{ 'abc'|reverse }}",
     "[3, 1, 2] ['a', 'b'] ['a', 'b'] [('a', 1), ('b', [1, 2])] [2, 1, 3] cba"},
    {"{{ l|sort }} {{ l|sort(reverse=true) }} {{ ['b', 'A', 'a']|sort }} {{ ['b', 'A', 'a']|unique|list }} {{ [{'n': 'b'}, {'n': 'a'}]|sort(attribute='n') }}",
     "[1, 2, 3] [3, 2, 1] ['A', 'a', 'b'] ['b', 'A'] [{'n': 'a'}, {'n': 'b'}]"},
    {"{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ [none, 1, 0, 'a']|select|list }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('equalto', 2)|list }}",
     "1 ['Be brief.'] [1, 'a'] [1, 3] [1, 3]"},
    {"{{ [1, 2, 3]|map('string')|join('') }} {{ ['a', 'b']|map('upper')|list }} {{ [{'a': {'b': 1}}]|map(attribute='a.b')|list }}",
     "123 ['A', 'B'] [1]"},
    {"{{ 'a-b-a'|replace('a', 'x') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 5|string + 'x' }} {{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 4.7|int }} {{ '4.5'|float }}",
     "x-b-x bba 5x 43 4 0 4 4.5"},
    {"{{ 'abc'|indent(2, true) }}|{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb\\n'|indent(first=true, blank=true) }}",
     "  abc|a\n    b\n\n    c|    a\n    b\n    "},
    {"{{ {'b': 1, 'A': 2, 'a': 3}|dictsort }} {{ {'b': 1, 'a': 3}|dictsort(by='value', reverse=true) }}",
     "[('A', 2), ('a', 3), ('b', 1)] [('a', 3), ('b', 1)]"},
    {"{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(5)|sum }} {{ [1, 5, 2]|max }} {{ [3, 1]|min }} {{ [1, 2]|sum(start=10) }}",
     "[0, 1, 2] [1, 4, 7] [5, 3, 1] 10 5 1 13"},
    {"{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 7|round }} {{ 2.1|round(method='ceil') }} {{ -3|abs }}",
     "2.0 4.0 2.67 7 3.0 3"},
    {"{{ 'a %s b'|format('x') }} {{ '%5.2f|%-4d|%x'|format(3.14159, 7, 255) }} {{ '%s-%d' % ('a', 3) }} {{ 'x'|center(5) }}|",
     "a x b  3.14|7   |ff a-3   x  |"},
    {"{{ 'hello world foo bar'|truncate(9) }} {{ 'a b c'|wordcount }} {{ '<&>'|e }} {{ 1|safe }} {{ [1, 2, 3, 4, 5]|batch(2)|list }}",
     "hello... 3 &lt;&amp;&gt; 1 [[1, 2], [3, 4], [5]]"},
};

const TemplateCase kTojsonCases[] = {
    {"{{ d|tojson }} {{ [1.0, none, true, 'x']|tojson }} {{ {}|tojson }} {{ []|tojson }}",
     "{\"a\": 1, \"b\": [1, 2]} [1.0, null, true, \"x\"] {} []"},
    {"{{ d|tojson(indent=2) }}",
     "{\n  \"a\": 1,\n  \"b\": [\n    1,\n    2\n  ]\n}"},
    {"{{ {'a': [], 'b': {}, 'c': [1, [2]]}|tojson(indent=4) }}",
     "{\n    \"a\": [],\n    \"b\": {},\n    \"c\": [\n        1,\n        [\n            2\n        ]\n    ]\n}"},
    {"{{ 'é\\n\"<\\u0001\\t\\\\'|tojson }} {{ 'é🦙'|tojson(ensure_ascii=true) }}",
     "\"é\\n\\\"<\\u0001\\t\\\\\" \"\\u00e9\\ud83e\\udd99\""},
    {"{{ {'b': 1, 'a': []}|tojson(sort_keys=true) }} {{ [1, {'a': 2}]|tojson(separators=(',', ':')) }} {{ d|tojson(indent='\\t') }}",
     "{\"a\": [], \"b\": 1} [1,{\"a\":2}] {\n\t\"a\": 1,\n\t\"b\": [\n\t\t1,\n\t\t2\n\t]\n}"},
    {"{{ messages|tojson }}",
     "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"}]"},
};

const TemplateCase kTestsCases[] = {
    {"{{ 1 is number }} {{ true is number }} {{ true is integer }} {{ 1.5 is float }} {{ 's' is string }} {{ d is mapping }} {{ l is sequence }} {{ d is sequence }} {{ s is iterable }} {{ 5 is iterable }}",
     "True True False True True True True True True False"},
    {"{{ none is none }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ true is boolean }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is lower }} {{ 'A' is upper }}",
     "True True False True True True True True True True"},
    {"{{ 1 is eq 1 }} {{ 2 is gt 1 }} {{ 2 is lessthan 1 }} {{ 'a' is in 'abc' }} {{ none is sameas none }} {{ range is callable }} {{ 'x' is not string }} {{ l is not mapping }}",
     "True True False True True True False True"},
};

const TemplateCase kStringsCases[] = {
    {"{{ s.upper() }} {{ 'AbC'.lower() }} {{ 'ab cd'.title() }} {{ 'aB'.capitalize() }} {{ 'aB'.swapcase() }}",
     "HÉLLO abc Ab Cd Ab Ab"},
    {"{{ 'abc'.startswith('a') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('bc') }} {{ 'abc'.find('c') }} {{ 'abcb'.rfind('b') }} {{ 'abc'.find('z') }} {{ 'abab'.count('ab') }}",
     "True True True 2 3 -1 2"},
    {"{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'a\\nb'.splitlines() }}",
     "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a b', 'c'] ['a', 'b']"},
    {"[{{ '  x '.strip() }}] [{{ '  x '.lstrip() }}] [{{ '  x '.rstrip() }}] [{{ 'xxhixx'.strip('x') }}] [{{ 'a\\n\\n'.rstrip('\\n') }}]",
     "[x] [x ] [  x] [hi] [a]"},
    {"{{ 'a-b'.replace('-', '+') }} {{ ','.join(['a', 'b']) }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{} {x}'.format(1, x=2) }} {{ 'ab'.removeprefix('a') }} {{ '7'.zfill(3) }}",
     "a+b a,b aba 1 2 b 007"},
    {"{{ 'Traduis: «bonjour» 你好 🦙'|length }} {{ '你好🦙'[1] }} {{ '你好🦙'[::-1] }} {{ 'ÀÉÎ'.lower() }} {{ 'straße'.upper() }}",
     "23 好 🦙好你 àéî STRASSE"},
};

const TemplateCase kGlobalsCases[] = {
    {"{{ range(3)|list }} {{ dict(a=1, b=2) }} {{ namespace(a=1).a }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j %p') }}",
     "[0, 1, 2] {'a': 1, 'b': 2} 1 21 Nov 2026 2026-11-21 12:00:00 Saturday November 325 PM"},
};
// clang-format on

TEST(ChatTemplateLanguage, WhitespaceControl) {
    expect_cases(kWhitespaceCases);
}
TEST(ChatTemplateLanguage, Literals) {
    expect_cases(kLiteralsCases);
}
TEST(ChatTemplateLanguage, Operators) {
    expect_cases(kOperatorsCases);
}
TEST(ChatTemplateLanguage, AttributeItemAndSliceAccess) {
    expect_cases(kAccessCases);
}
TEST(ChatTemplateLanguage, UndefinedBehavesLikeJinja2) {
    expect_cases(kUndefinedCases);
}
TEST(ChatTemplateLanguage, Loops) {
    expect_cases(kLoopsCases);
}
TEST(ChatTemplateLanguage, AssignmentAndScopes) {
    expect_cases(kAssignmentCases);
}
TEST(ChatTemplateLanguage, Macros) {
    expect_cases(kMacrosCases);
}
TEST(ChatTemplateLanguage, Filters) {
    expect_cases(kFiltersCases);
}
TEST(ChatTemplateLanguage, TojsonIsPythonJsonDumps) {
    expect_cases(kTojsonCases);
}
TEST(ChatTemplateLanguage, Tests) {
    expect_cases(kTestsCases);
}
TEST(ChatTemplateLanguage, StringMethods) {
    expect_cases(kStringsCases);
}
TEST(ChatTemplateLanguage, Globals) {
    expect_cases(kGlobalsCases);
}

TEST(ChatTemplateErrors, SyntaxErrorsCarryTheLine) {
    const auto e = render_error("line1\n{% if true %}\n  {{ foo( }}\n{% endif %}\n");
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->kind(), TemplateError::Kind::Syntax);
    EXPECT_EQ(e->line(), 3);
    EXPECT_EQ(e->message(), "unexpected '}', expected ')'");
    EXPECT_NE(std::string(e->what()).find("line 3"), std::string::npos);
}

TEST(ChatTemplateErrors, SyntaxErrorMessages) {
    const std::pair<const char*, const char*> cases[] = {
        {"{{ foo bar }}", "expected token 'end of print statement', got 'bar'"},
        {"{% if %}", "Expected an expression, got 'end of statement block'"},
        {"{% for x in l %}",
         "Unexpected end of template. Jinja was looking for the following tags: 'endfor' or "
         "'else'. The innermost block that needs to be closed is 'for'."},
        {"{% endfor %}", "Encountered unknown tag 'endfor'."},
        {"{% if x %}{% endfor %}",
         "Encountered unknown tag 'endfor'. Jinja was looking for the following tags: 'elif' "
         "or 'else' or 'endif'. The innermost block that needs to be closed is 'if'."},
        {"{% %}", "tag name expected"},
        {"{# open", "Missing end of comment tag"},
        {"{{ 1 @ 2 }}", "unexpected char '@' at 5"},
        {"{{ \"\\x4\" }}", "truncated \\xXX escape"},
        {"{{ x|nosuchfilter }}", "No filter named 'nosuchfilter'."},
        {"{{ x is nosuchtest }}", "No test named 'nosuchtest'."},
        {"{% break %}", "'break' outside loop"},
    };
    for (const auto& [source, message] : cases) {
        SCOPED_TRACE(source);
        const auto e = render_error(source);
        ASSERT_TRUE(e.has_value());
        EXPECT_EQ(e->kind(), TemplateError::Kind::Syntax);
        EXPECT_EQ(e->message(), message);
        EXPECT_EQ(e->line(), 1);
    }
}

TEST(ChatTemplateErrors, RenderErrorsUseJinja2Wording) {
    const std::pair<const char*, const char*> cases[] = {
        {"{{ u.x }}", "'u' is undefined"},
        {"{{ d.missing.x }}", "'dict object' has no attribute 'missing'"},
        {"{{ d['zz'] + 1 }}", "'dict object' has no attribute 'zz'"},
        {"{{ u + 'a' }}", "'u' is undefined"},
        {"{{ undefined_fn() }}", "'undefined_fn' is undefined"},
        {"{{ 1 + 'a' }}", "unsupported operand type(s) for +: 'int' and 'str'"},
        {"{{ 'a' + 1 }}", "can only concatenate str (not \"int\") to str"},
        {"{{ 1 < 'a' }}", "'<' not supported between instances of 'int' and 'str'"},
        {"{{ 5 // 0 }}", "integer division or modulo by zero"},
        {"{{ 1 in 'abc' }}", "'in <string>' requires string as left operand, not int"},
        {"{{ 'a' in none }}", "argument of type 'NoneType' is not iterable"},
        {"{% for x in none %}{% endfor %}", "'NoneType' object is not iterable"},
        {"{% set x = 1 %}{% set x.y = 2 %}", "cannot assign attribute on non-namespace object"},
        {"{{ l.append(4) }}", "access to attribute 'append' of 'list' object is unsafe."},
        {"{% for a, b in [[1]] %}{% endfor %}", "not enough values to unpack (expected 2, got 1)"},
        {"{% if true %}{{ 1|nosuchfilter }}{% endif %}", "No filter named 'nosuchfilter' found."},
    };
    const auto vars = variables();
    for (const auto& [source, message] : cases) {
        SCOPED_TRACE(source);
        const auto e = render_error(source, vars);
        ASSERT_TRUE(e.has_value());
        EXPECT_EQ(e->kind(), TemplateError::Kind::Render);
        EXPECT_EQ(e->message(), message);
        EXPECT_EQ(e->line(), 1);
    }
}

TEST(ChatTemplateErrors, RaiseExceptionGivesTheTemplatesMessage) {
    const auto e = render_error(
        "a\n{% if true %}\n{{ raise_exception('Roles must alternate') }}\n{% endif %}");
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->kind(), TemplateError::Kind::Raised);
    EXPECT_EQ(e->message(), "Roles must alternate");
    EXPECT_STREQ(e->what(), "Roles must alternate");
    EXPECT_EQ(e->line(), 3);
}

TEST(ChatTemplateErrors, RunawayRecursionIsAnErrorNotACrash) {
    const auto e = render_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->kind(), TemplateError::Kind::Render);
}

TEST(ChatTemplateErrors, IntegerOverflowIsAnError) {
    EXPECT_TRUE(render_error("{{ 9223372036854775807 + 1 }}").has_value());
    EXPECT_TRUE(render_error("{{ 2 ** 64 }}").has_value());
}

TEST(ChatTemplate, InputsBecomeTemplateVariables) {
    const ChatTemplate tpl(
        "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}{{ eos_token }}"
        "|{{ tools is defined }}|{{ enable_thinking }}");
    ChatTemplateInputs inputs;
    inputs.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
    inputs.bos_token = "<s>";
    inputs.eos_token = "</s>";
    EXPECT_EQ(tpl.render(inputs), "<s><user>Hi<assistant></s>|False|");
    inputs.add_generation_prompt = false;
    inputs.tools = nlohmann::ordered_json::array();
    inputs.extra["enable_thinking"] = false;
    EXPECT_EQ(tpl.render(inputs), "<s><user>Hi</s>|True|False");
}

TEST(ChatTemplate, ToolsKeepTheirKeyOrder) {
    const ChatTemplate tpl("{% for t in tools %}{{ t | tojson }}{% endfor %}");
    ChatTemplateInputs inputs;
    inputs.tools = nlohmann::ordered_json::parse(
        R"([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])");
    EXPECT_EQ(tpl.render(inputs),
              R"({"type": "function", "function": {"name": "get_weather", "parameters": {}}})");
}

TEST(ChatTemplate, StrftimeNowUsesTheInjectedDate) {
    const ChatTemplate tpl("{{ strftime_now('%d %b %Y') }}");
    ChatTemplateInputs inputs;
    inputs.now = kDate;
    EXPECT_EQ(tpl.render(inputs), "21 Nov 2026");
    inputs.now.reset();  // the local clock: only the shape is predictable
    EXPECT_EQ(tpl.render(inputs).size(), std::string("21 Nov 2026").size());
}

TEST(ChatTemplate, RenderVariablesNeedsAnObject) {
    const ChatTemplate tpl("x");
    EXPECT_THROW(tpl.render_variables(nlohmann::ordered_json::array()), TemplateError);
}

TEST(ChatTemplate, MovedTemplateStillRenders) {
    ChatTemplate a("{{ 1 + 1 }}");
    ChatTemplate b = std::move(a);
    EXPECT_EQ(b.render_variables(nlohmann::ordered_json::object()), "2");
    EXPECT_EQ(b.source(), "{{ 1 + 1 }}");
}

// One compiled template, rendered from several threads at once: the tree is immutable and
// every render has its own interpreter state.
TEST(ChatTemplate, ConcurrentRendersAgree) {
    const ChatTemplate tpl(
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "{{ m.content | upper }}{% endfor %}{{ ns.n }}");
    const auto vars = variables();
    const std::string expected = tpl.render_variables(vars);
    std::vector<std::thread> threads;
    std::vector<int> ok(4, 0);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            int good = 0;
            for (int i = 0; i < 200; ++i) good += tpl.render_variables(vars) == expected ? 1 : 0;
            ok[static_cast<std::size_t>(t)] = good;
        });
    }
    for (auto& th : threads) th.join();
    for (int good : ok) EXPECT_EQ(good, 200);
}

}  // namespace
}  // namespace ember
