#include "engine/tokenizer/unicode.h"

namespace ember::tok {

size_t append_lossy_utf8(std::string_view bytes, std::string& out, bool hold_incomplete) {
    size_t i = 0;
    while (i < bytes.size()) {
        const Utf8Step st = utf8_step(bytes.substr(i));
        if (st.status == Utf8Status::Valid) {
            out.append(bytes.substr(i, st.length));
        } else if (st.status == Utf8Status::Incomplete && hold_incomplete) {
            return i;
        } else {
            out += kReplacementCharacter;
        }
        i += st.length;
    }
    return i;
}

namespace {

ByteLevelTables make_byte_level_tables() {
    ByteLevelTables t;
    t.cp_to_byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        const uint32_t cp = printable ? b : next++;
        t.byte_to_cp[b] = static_cast<uint16_t>(cp);
        t.cp_to_byte[cp] = static_cast<int16_t>(b);
    }
    return t;
}

}  // namespace

const ByteLevelTables& byte_level_tables() {
    static const ByteLevelTables tables = make_byte_level_tables();
    return tables;
}

std::string byte_level_encode(std::string_view bytes) {
    const ByteLevelTables& t = byte_level_tables();
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) append_utf8(out, t.byte_to_cp[static_cast<unsigned char>(c)]);
    return out;
}

void byte_level_decode_append(std::string_view text, std::string& out) {
    const ByteLevelTables& t = byte_level_tables();
    size_t i = 0;
    while (i < text.size()) {
        const auto b0 = static_cast<unsigned char>(text[i]);
        if (b0 < 0x80) {
            // ASCII outside the alphabet (space, controls) only appears in odd vocabularies.
            out += static_cast<char>(b0);
            ++i;
            continue;
        }
        const Utf8Step st = utf8_step(text.substr(i));
        if (st.status == Utf8Status::Valid && st.length == 2) {
            const char32_t cp = st.code_point;
            if (cp < t.cp_to_byte.size() && t.cp_to_byte[cp] >= 0) {
                out += static_cast<char>(t.cp_to_byte[cp]);
                i += 2;
                continue;
            }
        }
        out.append(text.substr(i, st.length));
        i += st.length;
    }
}

}  // namespace ember::tok
