// UTF-8 helpers and the GPT-2 byte-level alphabet shared by the tokenizer sources.
//
// Internal to engine/tokenizer: nothing outside the tokenizer should need these.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/util/utf8.h"

namespace ember::tok {

// Length in bytes of the UTF-8 sequence a lead byte announces; 1 for bytes that cannot start
// a sequence, so callers walking a string always make progress on malformed input.
inline size_t utf8_len(unsigned char lead) {
    if (lead < 0x80) return 1;
    if ((lead & 0xE0) == 0xC0) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    if ((lead & 0xF8) == 0xF0) return 4;
    return 1;
}

enum class Utf8Status { Valid, Incomplete, Invalid };
struct Utf8Step {
    Utf8Status status;
    // Valid: bytes of the character. Incomplete: bytes present of a sequence that the next
    // bytes could still complete. Invalid: the maximal subpart (at least 1 byte) that one
    // U+FFFD replaces, as Unicode recommends and Python / Rust lossy decoding do.
    size_t len;
};
// Classifies the start of `s` (non-empty) under RFC 3629: no overlongs, no surrogates,
// nothing above U+10FFFF.
Utf8Step utf8_step(std::string_view s);

// Appends `bytes` with every ill-formed part replaced by U+FFFD. With `hold_incomplete`, a
// trailing incomplete sequence is not consumed: the number of bytes consumed is returned.
size_t append_lossy_utf8(std::string_view bytes, std::string& out, bool hold_incomplete);

using ember::append_utf8;  // engine/util/utf8.h

// The GPT-2 byte-level alphabet: every byte maps to one printable code point so that BPE
// vocabularies can be stored as text. Printable Latin-1 bytes map to themselves, the other 68
// bytes to U+0100.. in byte order.
struct ByteLevelTables {
    std::array<uint16_t, 256> byte_to_cp{};
    std::array<int16_t, 324> cp_to_byte{};  // -1 for code points outside the alphabet
};
const ByteLevelTables& byte_level_tables();

// Maps raw bytes to their byte-level text.
std::string byte_level_encode(std::string_view bytes);

// Inverse of byte_level_encode; code points outside the alphabet are copied through as UTF-8
// (vocabularies sometimes hold such tokens, and dropping text would be worse).
void byte_level_decode_append(std::string_view text, std::string& out);

}  // namespace ember::tok
