#include "ui/tui/markdown.h"

#include <md4c.h>

#include <charconv>
#include <string>

#include "engine/util/utf8.h"
#include "ui/tui/text.h"

namespace ember::ui::tui {

namespace {

const char* const kBullet = "• ";
const char* const kQuoteBar = "│ ";
const char* const kCodeBar = "┃ ";

// What a line inside a container is prefixed with.
struct Container {
    enum class Kind { Quote, List, Item, Code };
    Kind kind = Kind::Quote;
    std::string marker;  // printed on the first line inside it (items: "• ", "3. ")
    bool marker_shown = false;
    bool ordered = false;  // lists
    unsigned next_number = 1;
    bool tight = true;
};

std::string decode_entity(std::string_view entity) {
    if (entity == "&amp;") return "&";
    if (entity == "&lt;") return "<";
    if (entity == "&gt;") return ">";
    if (entity == "&quot;") return "\"";
    if (entity == "&apos;") return "'";
    if (entity == "&nbsp;") return "\u00a0";
    if (entity.size() > 3 && entity[1] == '#' && entity.back() == ';') {
        const bool hex = entity[2] == 'x' || entity[2] == 'X';
        const std::string_view digits = entity.substr(hex ? 3 : 2, entity.size() - (hex ? 4 : 3));
        uint32_t value = 0;
        const auto [end, error] =
            std::from_chars(digits.data(), digits.data() + digits.size(), value, hex ? 16 : 10);
        if (error == std::errc() && end == digits.data() + digits.size() && value > 0 &&
            value <= 0x10FFFF && !(value >= 0xD800 && value <= 0xDFFF)) {
            std::string out;
            append_utf8(out, value);
            return out;  // append() shows a control character's stand-in
        }
    }
    return std::string(entity);
}

// Builds the lines while md4c walks the document.
class LineBuilder {
public:
    explicit LineBuilder(Style base) : base_(base) {}

    std::vector<LogicalLine> take() {
        flush_line();
        return std::move(lines_);
    }

    int enter_block(MD_BLOCKTYPE type, void* detail) {
        switch (type) {
            case MD_BLOCK_DOC:
                break;
            case MD_BLOCK_QUOTE:
                start_block();
                containers_.push_back({Container::Kind::Quote, kQuoteBar});
                break;
            case MD_BLOCK_UL:
            case MD_BLOCK_OL: {
                if (list_depth() == 0) {
                    start_block();
                } else {
                    flush_line();
                }
                Container list{Container::Kind::List, {}};
                list.ordered = type == MD_BLOCK_OL;
                if (list.ordered) {
                    const auto* ol = static_cast<const MD_BLOCK_OL_DETAIL*>(detail);
                    list.next_number = ol->start;
                    list.tight = ol->is_tight != 0;
                } else {
                    list.tight = static_cast<const MD_BLOCK_UL_DETAIL*>(detail)->is_tight != 0;
                }
                containers_.push_back(list);
                break;
            }
            case MD_BLOCK_LI: {
                Container* list = innermost_list();
                flush_line();
                if (list != nullptr && !list->tight && items_in_list_ > 0) add_gap();
                need_gap_ = false;
                std::string marker = kBullet;
                if (list != nullptr && list->ordered) {
                    marker = std::to_string(list->next_number++) + ". ";
                }
                containers_.push_back({Container::Kind::Item, marker});
                ++items_in_list_;
                break;
            }
            case MD_BLOCK_HR:
                start_block();
                rule_pending_ = true;
                break;
            case MD_BLOCK_H:
                start_block();
                block_style_ = style::kHeading | style::kBold;
                break;
            case MD_BLOCK_CODE:
                start_block();
                containers_.push_back({Container::Kind::Code, kCodeBar});
                block_style_ = style::kCodeBlock;
                in_code_ = true;
                break;
            case MD_BLOCK_P:
                // The first paragraph of a list item sits on the bullet's line.
                if (!containers_.empty() && containers_.back().kind == Container::Kind::Item &&
                    !containers_.back().marker_shown && spans_.empty()) {
                    need_gap_ = false;
                } else {
                    start_block();
                }
                break;
            default:  // tables and raw HTML are not enabled
                start_block();
                break;
        }
        return 0;
    }

    int leave_block(MD_BLOCKTYPE type) {
        switch (type) {
            case MD_BLOCK_DOC:
                break;
            case MD_BLOCK_QUOTE:
                flush_line();
                pop(Container::Kind::Quote);
                need_gap_ = true;
                break;
            case MD_BLOCK_UL:
            case MD_BLOCK_OL:
                flush_line();
                pop(Container::Kind::List);
                if (list_depth() == 0) {
                    need_gap_ = true;
                    items_in_list_ = 0;
                }
                break;
            case MD_BLOCK_LI:
                flush_line();
                pop(Container::Kind::Item);
                break;
            case MD_BLOCK_HR:
                flush_line();
                need_gap_ = true;
                break;
            case MD_BLOCK_CODE:
                // A fence still open while the reply streams has no final newline yet.
                if (!spans_.empty()) flush_line();
                pop(Container::Kind::Code);
                in_code_ = false;
                block_style_ = style::kPlain;
                need_gap_ = true;
                break;
            default:
                flush_line();
                block_style_ = style::kPlain;
                need_gap_ = true;
                break;
        }
        return 0;
    }

    int enter_span(MD_SPANTYPE type) {
        span_styles_.push_back(span_style(type));
        return 0;
    }

    int leave_span(MD_SPANTYPE) {
        if (!span_styles_.empty()) span_styles_.pop_back();
        return 0;
    }

    int text(MD_TEXTTYPE type, std::string_view text) {
        switch (type) {
            case MD_TEXT_BR:
            case MD_TEXT_SOFTBR:
                flush_line(true);
                break;
            case MD_TEXT_NULLCHAR:
                append(std::string_view("\0", 1));  // shown as its stand-in
                break;
            case MD_TEXT_ENTITY:
                append(decode_entity(text));
                break;
            case MD_TEXT_CODE:
                if (in_code_) {
                    append_code(text);
                } else {
                    append(text);
                }
                break;
            default:
                append(text);
                break;
        }
        return 0;
    }

private:
    static Style span_style(MD_SPANTYPE type) {
        switch (type) {
            case MD_SPAN_EM:
                return style::kItalic;
            case MD_SPAN_STRONG:
                return style::kBold;
            case MD_SPAN_CODE:
                return style::kInlineCode;
            case MD_SPAN_A:
            case MD_SPAN_WIKILINK:
                return style::kLink;
            case MD_SPAN_DEL:
                return style::kStrike;
            case MD_SPAN_U:
                return style::kUnderline;
            default:
                return style::kPlain;
        }
    }

    Style current_style() const {
        Style s = base_ | block_style_;
        for (Style span : span_styles_) s |= span;
        return s;
    }

    int list_depth() const {
        int depth = 0;
        for (const auto& c : containers_) depth += c.kind == Container::Kind::List;
        return depth;
    }

    Container* innermost_list() {
        for (auto it = containers_.rbegin(); it != containers_.rend(); ++it) {
            if (it->kind == Container::Kind::List) return &*it;
        }
        return nullptr;
    }

    void pop(Container::Kind kind) {
        if (!containers_.empty() && containers_.back().kind == kind) containers_.pop_back();
    }

    // A new block: ends the line in progress and leaves a blank line after the last block.
    void start_block() {
        flush_line();
        if (need_gap_) add_gap();
        need_gap_ = false;
    }

    void add_gap() {
        if (lines_.empty()) return;
        LogicalLine blank;
        blank.first_prefix = prefix(false);
        blank.rest_prefix = blank.first_prefix;
        lines_.push_back(std::move(blank));
    }

    // The containers' prefixes; `first` shows item markers not yet shown (and marks them).
    Spans prefix(bool first) {
        Spans out;
        for (auto& c : containers_) {
            if (c.kind == Container::Kind::List) continue;
            std::string text = c.marker;
            if (c.kind == Container::Kind::Item) {
                if (!first || c.marker_shown) {
                    text.assign(static_cast<size_t>(display_width(c.marker)), ' ');
                } else {
                    c.marker_shown = true;
                }
            }
            const Style s = base_ | style::kMarker |
                            (c.kind == Container::Kind::Code ? style::kCodeBlock : style::kPlain);
            out.push_back({std::move(text), s});
        }
        return out;
    }

    void append(std::string_view text) {
        if (text.empty()) return;
        for (const Span& span : visible_spans(text, current_style())) {
            // A newline can only come from code; anywhere else it is a line break too.
            size_t start = 0;
            for (;;) {
                const size_t nl = span.text.find('\n', start);
                const std::string_view piece = std::string_view(span.text).substr(
                    start, nl == std::string::npos ? nl : nl - start);
                if (!piece.empty()) append_piece(piece, span.style);
                if (nl == std::string::npos) break;
                flush_line(true);
                start = nl + 1;
            }
        }
    }

    void append_piece(std::string_view piece, Style s) {
        if (!spans_.empty() && spans_.back().style == s) {
            spans_.back().text += piece;
        } else {
            spans_.push_back({std::string(piece), s});
        }
        line_open_ = true;
    }

    void append_code(std::string_view text) {
        // md4c hands code lines over with their newline; a blank code line is just "\n".
        if (text == "\n") {
            flush_line(true);
            return;
        }
        append(text);
    }

    void flush_line(bool force = false) {
        if (!line_open_ && !force && !rule_pending_) return;
        LogicalLine line;
        line.first_prefix = prefix(true);
        line.rest_prefix = prefix(false);
        line.spans = std::move(spans_);
        line.preformatted = in_code_;
        line.rule = rule_pending_;
        lines_.push_back(std::move(line));
        spans_.clear();
        line_open_ = false;
        rule_pending_ = false;
    }

    Style base_;
    Style block_style_ = style::kPlain;
    std::vector<Style> span_styles_;
    std::vector<Container> containers_;
    std::vector<LogicalLine> lines_;
    Spans spans_;
    bool line_open_ = false;
    bool in_code_ = false;
    bool need_gap_ = false;
    bool rule_pending_ = false;
    int items_in_list_ = 0;
};

}  // namespace

std::vector<LogicalLine> render_markdown(std::string_view text, Style base) {
    LineBuilder builder(base);
    MD_PARSER parser{};
    parser.abi_version = 0;
    parser.flags = MD_FLAG_NOHTML | MD_FLAG_STRIKETHROUGH;
    parser.enter_block = [](MD_BLOCKTYPE type, void* detail, void* user) {
        return static_cast<LineBuilder*>(user)->enter_block(type, detail);
    };
    parser.leave_block = [](MD_BLOCKTYPE type, void*, void* user) {
        return static_cast<LineBuilder*>(user)->leave_block(type);
    };
    parser.enter_span = [](MD_SPANTYPE type, void*, void* user) {
        return static_cast<LineBuilder*>(user)->enter_span(type);
    };
    parser.leave_span = [](MD_SPANTYPE type, void*, void* user) {
        return static_cast<LineBuilder*>(user)->leave_span(type);
    };
    parser.text = [](MD_TEXTTYPE type, const MD_CHAR* data, MD_SIZE size, void* user) {
        return static_cast<LineBuilder*>(user)->text(type, std::string_view(data, size));
    };
    if (md_parse(text.data(), static_cast<MD_SIZE>(text.size()), &parser, &builder) != 0) {
        return render_plain(text, base);  // md4c gives up only on running out of memory
    }
    return builder.take();
}

std::vector<LogicalLine> render_plain(std::string_view text, Style base) {
    std::vector<LogicalLine> lines(1);
    for (const Span& span : visible_spans(text, base)) {
        size_t start = 0;
        for (;;) {
            const size_t nl = span.text.find('\n', start);
            const std::string piece =
                span.text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
            if (!piece.empty()) lines.back().spans.push_back({piece, span.style});
            if (nl == std::string::npos) break;
            lines.emplace_back();
            start = nl + 1;
        }
    }
    return lines;
}

}  // namespace ember::ui::tui
