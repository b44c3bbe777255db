// Lossy UTF-8 and the GPT-2 byte-level alphabet shared by the tokenizer sources (encoding and
// validating UTF-8 itself: engine/util/utf8.h).
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

// Appends `bytes` with every ill-formed part replaced by U+FFFD. With `hold_incomplete`, a
// trailing incomplete sequence is not consumed: the number of bytes consumed is returned.
size_t append_lossy_utf8(std::string_view bytes, std::string& out, bool hold_incomplete);

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
