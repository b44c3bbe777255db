// GBNF, the grammar language llama.cpp made common, parsed into a Grammar.
//
//   root   ::= object                 # a rule; `root` is where matching starts
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= [a-z]+ ":" ws ( "yes" | "no" )
//   ws     ::= [ \t\n]{0,4}
//
// Rules: `name ::= alternatives`, names of letters, digits, '-' and '_'. A rule ends at the end
// of its line unless a group is open or the next line starts with '|'. Items: "string
// literals" and [character classes] (ranges a-z, negation [^...]) with escapes \n \r \t \\ \"
// \] \[ \- \^ \xHH \uHHHH \UHHHHHHHH; `.` (any character); rule names; ( groups ); and
// the postfix operators * + ? {m} {m,} {m,n}. `#` starts a comment to the end of the line.
// Text is UTF-8; classes and `.` match whole code points (never a surrogate, never NUL).
#pragma once

#include <string_view>

#include "engine/grammar/grammar.h"

namespace ember::grammar {

// Throws GrammarError "line L, column C: ..." for a syntax error, or naming the rule for an
// undefined or left-recursive rule, or naming the limit of `budget` (null: the defaults of
// CompileLimits) that the grammar passes: groups nested too deep, too many elements or rules,
// too long to compile. String literals must be text: no NUL, no surrogate code point.
Grammar parse_gbnf(std::string_view text, const std::string& root = "root",
                   CompileBudget* budget = nullptr);

}  // namespace ember::grammar
