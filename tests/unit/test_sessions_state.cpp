// Stored prefix state on real SQLite files, with KV caches filled with recognisable values:
// the state_io byte format, exact restore, sharing of common prefixes, partial blocks, the
// fingerprint and KV type in the key, token verification, corrupted blobs (dropped, never
// restored) and least-recently-used eviction under a cap.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/model/state_io.h"
#include "engine/tensor/blocks.h"
#include "sessions/blob_codec.h"
#include "sessions/schema.h"
#include "sessions/state_store.h"
#include "tests/support/temp_dir.h"

namespace ember::sessions {
namespace {

namespace fs = std::filesystem;

using TempDir = ::ember::test::TempDir;

ModelConfig small_config() {
    ModelConfig c;
    c.n_layer = 3;
    c.n_head_kv = 2;
    c.head_dim = 8;
    c.value_dim = 8;
    return c;
}

// The value every K/V element gets for a given token prefix: a function of the position and
// the tokens up to it, so states of different prefixes differ and equal prefixes agree.
float element_value(std::span<const int32_t> tokens, int64_t pos, int64_t layer, int64_t i,
                    bool is_v) {
    uint32_t h = 2166136261u;
    for (int64_t p = 0; p <= pos; ++p) h = (h ^ static_cast<uint32_t>(tokens[p])) * 16777619u;
    h = (h ^ static_cast<uint32_t>(layer * 131 + i * 7 + (is_v ? 1 : 0))) * 16777619u;
    return static_cast<float>(h % 100000) / 1000.0f - 50.0f;
}

// A state holding `tokens` as if they had been evaluated.
std::unique_ptr<InferenceState> evaluated_state(std::span<const int32_t> tokens,
                                                KvType type = KvType::F32) {
    auto st = make_state(small_config(), 1024, type);
    KvCache& kv = st->kv;
    kv.reserve(static_cast<int64_t>(tokens.size()));
    std::vector<float> k(static_cast<size_t>(kv.k_width())), v(static_cast<size_t>(kv.v_width()));
    for (int64_t l = 0; l < kv.n_layer(); ++l) {
        for (int64_t pos = 0; pos < static_cast<int64_t>(tokens.size()); ++pos) {
            for (int64_t i = 0; i < kv.k_width(); ++i) {
                k[static_cast<size_t>(i)] = element_value(tokens, pos, l, i, false);
                v[static_cast<size_t>(i)] = element_value(tokens, pos, l, i, true);
            }
            kv.store(l, pos, k.data(), v.data());  // as the forward pass writes, in `type`
        }
    }
    kv.set_length(static_cast<int64_t>(tokens.size()));
    return st;
}

// Whether positions [0, n) of `a` and `b` hold the same bytes.
bool same_rows(KvCache& a, KvCache& b, int64_t n) {
    const auto k_bytes = static_cast<size_t>(a.k_row_bytes());
    const auto v_bytes = static_cast<size_t>(a.v_row_bytes());
    for (int64_t l = 0; l < a.n_layer(); ++l) {
        for (int64_t pos = 0; pos < n; ++pos) {
            if (std::memcmp(a.k_data(l, pos), b.k_data(l, pos), k_bytes) != 0) return false;
            if (std::memcmp(a.v_data(l, pos), b.v_data(l, pos), v_bytes) != 0) return false;
        }
    }
    return true;
}

std::vector<int32_t> token_run(size_t n, int32_t start) {
    std::vector<int32_t> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = start + static_cast<int32_t>(i * 7 % 50);
    return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

struct Fixture {
    explicit Fixture(const std::string& path) : db(path) { migrate(db); }
    StateStore store(std::string_view fingerprint = "model-a", KvType type = KvType::F32,
                     uint64_t cap = uint64_t{1} << 30) {
        StateStoreOptions o;
        o.block_tokens = 16;
        o.cap_bytes = cap;
        return StateStore(db, fingerprint, type, o);
    }
    int64_t count(const char* sql) {
        auto s = db.prepare(sql);
        s.step();
        return s.column_int(0);
    }
    Database db;
};

TEST(StateIo, RoundTripAndErrors) {
    const auto tokens = token_run(40, 3);
    auto src = evaluated_state(tokens);
    const auto blob = serialize_kv_rows(src->kv, 8, 30);
    const KvBlobInfo info = inspect_kv_rows(blob);
    EXPECT_EQ(info.begin, 8);
    EXPECT_EQ(info.count, 22);
    EXPECT_EQ(info.n_layer, 3);

    auto dst = make_state(small_config(), 1024);
    apply_kv_rows(blob, dst->kv, 8, 30);
    for (int64_t l = 0; l < 3; ++l) {
        for (int64_t pos = 8; pos < 30; ++pos) {
            ASSERT_EQ(std::memcmp(src->kv.k_row(l, pos), dst->kv.k_row(l, pos), 16 * 4), 0);
            ASSERT_EQ(std::memcmp(src->kv.v_row(l, pos), dst->kv.v_row(l, pos), 16 * 4), 0);
        }
    }
    EXPECT_EQ(dst->kv.length(), 0);  // applying rows does not claim them

    // Every truncation is an error, never a crash.
    for (size_t n = 0; n < blob.size(); n += 7) {
        EXPECT_THROW(inspect_kv_rows(std::span(blob).first(n)), StateFormatError) << n;
    }
    auto bad_version = blob;
    bad_version[4] = 99;
    EXPECT_THROW(inspect_kv_rows(bad_version), StateFormatError);
    auto bad_kind = blob;
    bad_kind[16] = 2;  // the reserved recurrent kind is not KV rows
    EXPECT_THROW(inspect_kv_rows(bad_kind), StateFormatError);
    // Another shape or type does not apply, and nothing is written.
    ModelConfig wider = small_config();
    wider.head_dim = 16;
    auto other = make_state(wider, 1024);
    EXPECT_THROW(apply_kv_rows(blob, other->kv, 8, 30), StateFormatError);
    auto f16 = make_state(small_config(), 1024, KvType::F16);
    EXPECT_THROW(apply_kv_rows(blob, f16->kv, 8, 30), StateFormatError);
    EXPECT_THROW(apply_kv_rows(blob, dst->kv, 0, 30), StateFormatError);  // outside the blob
}

// A q8_0 blob: type code 2, rows of whole Q8_0 blocks (16 elements: one zero-padded block of
// 34 bytes), applied byte for byte, and only to a q8_0 cache.
TEST(StateIo, Q8RowsRoundTripAndKeepTheirType) {
    const auto tokens = token_run(40, 3);
    auto src = evaluated_state(tokens, KvType::Q8_0);
    const auto blob = serialize_kv_rows(src->kv, 8, 30);
    const KvBlobInfo info = inspect_kv_rows(blob);
    EXPECT_EQ(info.type, KvType::Q8_0);
    EXPECT_EQ(info.k_width, 16);
    uint32_t code = 0;
    std::memcpy(&code, blob.data() + 32, sizeof code);  // after the blob and section headers
    EXPECT_EQ(code, 2u);
    const auto f32_blob = serialize_kv_rows(evaluated_state(tokens)->kv, 8, 30);
    EXPECT_EQ(f32_blob.size() - blob.size(), 22u * 3 * 2 * (16 * 4 - 34));
    auto dst = make_state(small_config(), 1024, KvType::Q8_0);
    apply_kv_rows(blob, dst->kv, 8, 30);
    for (int64_t l = 0; l < 3; ++l) {
        for (int64_t pos = 8; pos < 30; ++pos) {
            ASSERT_EQ(std::memcmp(src->kv.k_data(l, pos), dst->kv.k_data(l, pos), 34), 0);
            ASSERT_EQ(std::memcmp(src->kv.v_data(l, pos), dst->kv.v_data(l, pos), 34), 0);
        }
    }
    for (const KvType other : {KvType::F32, KvType::F16}) {
        auto cache = make_state(small_config(), 1024, other);
        EXPECT_THROW(apply_kv_rows(blob, cache->kv, 8, 30), StateFormatError);
        auto q8 = make_state(small_config(), 1024, KvType::Q8_0);
        const auto foreign = serialize_kv_rows(evaluated_state(tokens, other)->kv, 8, 30);
        EXPECT_THROW(apply_kv_rows(foreign, q8->kv, 8, 30), StateFormatError);
    }
    auto bad_type = blob;
    bad_type[32] = 3;  // no such kv type
    EXPECT_THROW(inspect_kv_rows(bad_type), StateFormatError);
}

TEST(BlobCodec, RoundTripAndCorruption) {
    std::vector<uint8_t> raw(10000);
    for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(i * i % 251);
    const auto packed = pack_blob(raw);
    EXPECT_EQ(unpack_blob(packed), raw);
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        auto bad = packed;
        bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
        try {
            EXPECT_EQ(unpack_blob(bad), raw);  // a flip zstd ignores must still give the data
        } catch (const BlobError&) {
        }
    }
    EXPECT_THROW(unpack_blob(std::span(packed).first(packed.size() / 2)), BlobError);
    EXPECT_THROW(unpack_blob({}), BlobError);
}

TEST(BlobCodec, BytePlanesRoundTripForEveryWidthAndSize) {
    std::mt19937 rng(11);
    std::vector<uint8_t> raw_buffer;
    std::vector<uint8_t> plane_buffer;
    for (int planes : {1, 2, 3, 4, 16}) {
        for (size_t size : {size_t{0}, size_t{1}, size_t{15}, size_t{4096}, size_t{10001}}) {
            std::vector<uint8_t> raw(size);
            for (auto& b : raw) b = static_cast<uint8_t>(rng());
            const auto packed = pack_blob(raw, 3, planes);
            EXPECT_EQ(unpack_blob(packed), raw) << planes << " planes, " << size << " bytes";
            // Into reused buffers of another size, as a restore of several blocks does.
            unpack_blob(packed, raw_buffer, plane_buffer);
            EXPECT_EQ(raw_buffer, raw) << planes << " planes, " << size << " bytes";
        }
    }
    EXPECT_THROW(pack_blob(std::vector<uint8_t>(8), 3, 0), std::invalid_argument);
    EXPECT_THROW(pack_blob(std::vector<uint8_t>(8), 3, 17), std::invalid_argument);
}

// f16 numbers like a KV cache's: their high bytes (sign, exponent) take a few values.
std::vector<uint8_t> f16_rows(size_t n) {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.5f);
    std::vector<uint8_t> bytes(n * 2);
    for (size_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_fp16(normal(rng));
        std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
    return bytes;
}

TEST(BlobCodec, BytePlanesStoreF16RowsSmaller) {
    // Several zstd blocks (128 KiB) per plane: a block mixing both planes has one literal
    // table for both and gains nothing.
    const auto rows = f16_rows(1 << 20);
    const size_t interleaved = pack_blob(rows, 3, 1).size();
    const size_t planes = pack_blob(rows, 3, 2).size();
    EXPECT_LT(planes, interleaved * 95 / 100) << planes << " vs " << interleaved;
    EXPECT_LT(planes, rows.size() * 92 / 100) << planes << " of " << rows.size();
}

TEST(BlobCodec, ReadsVersionOneEnvelopes) {
    // Version 1: the version 2 header without the planes field and reserved word (bytes
    // 24..31), planes 1.
    const auto raw = f16_rows(5000);
    auto v1 = pack_blob(raw, 3, 1);
    v1.erase(v1.begin() + 24, v1.begin() + 32);
    v1[4] = 1;
    EXPECT_EQ(unpack_blob(v1), raw);
    // A version 2 header with a bad planes field is refused, not guessed at.
    auto bad = pack_blob(raw, 3, 2);
    bad[24] = 0;
    EXPECT_THROW(unpack_blob(bad), BlobError);
    bad[24] = 200;
    EXPECT_THROW(unpack_blob(bad), BlobError);
    auto future = pack_blob(raw, 3, 2);
    future[4] = 3;
    EXPECT_THROW(unpack_blob(future), BlobError);
}

TEST(StateStore, RestoresExactlyAfterReopen) {
    TempDir dir;
    const auto tokens = token_run(75, 10);  // 4 full blocks of 16 and a partial of 11
    auto src = evaluated_state(tokens);
    {
        Fixture f(dir.file("s.db"));
        StateStore store = f.store();
        store.save(tokens, *src);
        EXPECT_EQ(store.take_warning(), "");
        EXPECT_EQ(f.count("SELECT COUNT(*) FROM state_blocks"), 5);
        EXPECT_EQ(f.count("SELECT SUM(n_tokens) FROM state_blocks"), 75);
    }
    Fixture f(dir.file("s.db"));
    StateStore store = f.store();
    // A later turn: the saved prompt plus new tokens.
    const auto longer = concat(tokens, token_run(20, 500));
    auto dst = make_state(small_config(), 1024);
    EXPECT_EQ(store.restore(longer, 0, *dst), 75);
    EXPECT_EQ(dst->kv.length(), 75);
    EXPECT_TRUE(same_rows(src->kv, dst->kv, 75));

    // With part already live, only the rest is loaded, and the result is the same.
    auto part = evaluated_state(std::span(tokens).first(30));
    EXPECT_EQ(store.restore(longer, 30, *part), 75);
    EXPECT_TRUE(same_rows(src->kv, part->kv, 75));

    // Nothing to gain: `have` comes back.
    EXPECT_EQ(store.restore(tokens, 75, *dst), 75);
    const StateStats st = read_state_stats(f.db);
    EXPECT_EQ(st.restore_hits, 2);
    EXPECT_EQ(st.tokens_restored, 75 + 45);
}

// f16 and q8_0 caches round-trip byte for byte, and a cache of any other type finds nothing
// (the key chain's seed holds the KV type).
TEST(StateStore, F16AndQ8CachesRoundTripAndStayApart) {
    TempDir dir;
    Fixture f(dir.file("kv.db"));
    const auto tokens = token_run(40, 1);
    for (const KvType type : {KvType::F16, KvType::Q8_0}) {
        SCOPED_TRACE(kv_type_name(type));
        auto src = evaluated_state(tokens, type);
        StateStore store = f.store("model-a", type);
        store.save(tokens, *src);
        auto dst = make_state(small_config(), 1024, type);
        EXPECT_EQ(store.restore(tokens, 0, *dst), 40);
        EXPECT_TRUE(same_rows(src->kv, dst->kv, 40));
    }
    StateStore f32 = f.store("model-a", KvType::F32);
    auto other = make_state(small_config(), 1024, KvType::F32);
    EXPECT_EQ(f32.restore(tokens, 0, *other), 0);
    // Stored as f16 and as q8_0 only: neither restores into the other's cache, nor into f32.
    EXPECT_NE(state_seed("model-a", KvType::F16, 16), state_seed("model-a", KvType::Q8_0, 16));
    EXPECT_NE(state_seed("model-a", KvType::F32, 16), state_seed("model-a", KvType::Q8_0, 16));
}

TEST(StateStore, OtherFingerprintNeverRestores) {
    TempDir dir;
    Fixture f(dir.file("fp.db"));
    const auto tokens = token_run(50, 2);
    StateStore a = f.store("model-a");
    a.save(tokens, *evaluated_state(tokens));
    StateStore b = f.store("model-b");
    auto dst = make_state(small_config(), 1024);
    EXPECT_EQ(b.restore(tokens, 0, *dst), 0);
    EXPECT_EQ(dst->kv.length(), 0);
}

TEST(StateStore, SharedPrefixIsStoredOnceAndRestoredAcrossConversations) {
    TempDir dir;
    Fixture f(dir.file("share.db"));
    StateStore store = f.store();
    const auto system = token_run(40, 100);  // a long system prompt, shared
    const auto first = concat(system, token_run(20, 1));
    const auto second = concat(system, token_run(25, 2));
    store.save(first, *evaluated_state(first));
    const int64_t bytes_one = f.count("SELECT SUM(stored_bytes) FROM state_blocks");

    // The second conversation starts warm up to the first differing token, even inside a
    // block the first conversation wrote.
    auto dst = make_state(small_config(), 1024);
    const int64_t got = store.restore(second, 0, *dst);
    EXPECT_EQ(got, 40);
    auto ref = evaluated_state(second);
    EXPECT_TRUE(same_rows(ref->kv, dst->kv, got));

    store.save(second, *evaluated_state(second));
    // Blocks wholly inside the shared prefix are stored once.
    EXPECT_EQ(f.count("SELECT COUNT(*) FROM state_blocks WHERE begin_pos < 32"), 2);
    EXPECT_LT(f.count("SELECT SUM(stored_bytes) FROM state_blocks"), 2 * bytes_one);
    // Both still restore fully.
    auto again = make_state(small_config(), 1024);
    EXPECT_EQ(store.restore(first, 0, *again), 60);
    EXPECT_TRUE(same_rows(evaluated_state(first)->kv, again->kv, 60));
}

TEST(StateStore, StorageGrowsLinearlyOverTurns) {
    // 20 turns of a growing conversation: every turn saves the whole prefix, and what is
    // stored stays within 1.3x of the final prefix's KV size (no growth with turns^2).
    TempDir dir;
    Fixture f(dir.file("grow.db"));
    StateStore store = f.store();
    std::vector<int32_t> conversation;
    for (int turn = 0; turn < 20; ++turn) {
        conversation = concat(conversation, token_run(23, 1000 + turn));
        store.save(conversation, *evaluated_state(conversation));
        // Superseded partial blocks are gone: exactly the conversation's tokens are stored.
        EXPECT_EQ(f.count("SELECT SUM(n_tokens) FROM state_blocks"),
                  static_cast<int64_t>(conversation.size()))
            << "turn " << turn;
    }
    const auto final_kv = static_cast<double>(
        evaluated_state(conversation)->kv.bytes_per_position() * conversation.size());
    const StateStats st = read_state_stats(f.db);
    EXPECT_LE(static_cast<double>(st.stored_bytes), 1.3 * final_kv)
        << "stored " << st.stored_bytes << " bytes for " << final_kv << " bytes of KV";
    EXPECT_LE(static_cast<double>(st.raw_bytes), 1.3 * final_kv);
    // The blobs on disk are what the rows say.
    EXPECT_EQ(f.count("SELECT SUM(length(state)) FROM state_blobs"), st.stored_bytes);
}

TEST(StateStore, TamperedTokensAreNotTrusted) {
    // The key matches but the stored tokens do not (what a hash collision would look like):
    // the chain stops before that block.
    TempDir dir;
    Fixture f(dir.file("collide.db"));
    StateStore store = f.store();
    const auto tokens = token_run(64, 7);
    store.save(tokens, *evaluated_state(tokens));
    auto tamper = f.db.prepare("UPDATE state_blocks SET tokens = ? WHERE begin_pos = 32");
    const auto other = token_run(16, 900);
    tamper.bind_blob(1, tokens_to_blob(other)).run();
    auto dst = make_state(small_config(), 1024);
    EXPECT_EQ(store.restore(tokens, 0, *dst), 32);
}

TEST(StateStore, CorruptedBlobIsDroppedAndReported) {
    TempDir dir;
    Fixture f(dir.file("corrupt.db"));
    const auto tokens = token_run(64, 3);
    {
        StateStore store = f.store();
        store.save(tokens, *evaluated_state(tokens));
    }
    // Flip a byte in the middle of the third block's blob.
    f.db.exec(
        "UPDATE state_blobs SET state = substr(state, 1, 60) || "
        "CASE WHEN substr(state, 61, 1) = x'00' THEN x'01' ELSE x'00' END || "
        "substr(state, 62) WHERE block_id IN (SELECT id FROM state_blocks WHERE begin_pos = 32)");
    StateStore store = f.store();
    auto dst = make_state(small_config(), 1024);
    EXPECT_EQ(store.restore(tokens, 0, *dst), 32);  // the good blocks before it still load
    EXPECT_TRUE(same_rows(evaluated_state(tokens)->kv, dst->kv, 32));
    const std::string warning = store.take_warning();
    EXPECT_NE(warning.find("dropped"), std::string::npos) << warning;
    EXPECT_EQ(store.take_warning(), "");  // reading it cleared it
    // The bad block and the one chained after it are gone; the next save restores them.
    EXPECT_EQ(f.count("SELECT COUNT(*) FROM state_blocks"), 2);
    EXPECT_EQ(read_state_stats(f.db).blobs_dropped, 1);
    store.save(tokens, *evaluated_state(tokens));
    auto again = make_state(small_config(), 1024);
    EXPECT_EQ(store.restore(tokens, 0, *again), 64);

    // A blob cut short, and one replaced by garbage.
    f.db.exec(
        "UPDATE state_blobs SET state = substr(state, 1, 10) "
        "WHERE block_id IN (SELECT id FROM state_blocks WHERE begin_pos = 0)");
    auto cut = make_state(small_config(), 1024);
    EXPECT_EQ(store.restore(tokens, 0, *cut), 0);
    EXPECT_NE(store.take_warning(), "");
    store.save(tokens, *evaluated_state(tokens));
    f.db.exec(
        "UPDATE state_blobs SET state = randomblob(length(state)) "
        "WHERE block_id IN (SELECT id FROM state_blocks WHERE begin_pos = 16)");
    auto garbage = make_state(small_config(), 1024);
    EXPECT_EQ(store.restore(tokens, 0, *garbage), 16);
}

TEST(StateStore, EvictsLeastRecentlyUsedUnderCap) {
    TempDir dir;
    Fixture f(dir.file("evict.db"));
    const auto a = token_run(64, 1);
    const auto b = token_run(64, 200);
    const auto c = token_run(64, 400);
    int64_t one_conversation = 0;
    {
        StateStore probe = f.store();
        probe.save(a, *evaluated_state(a));
        one_conversation = f.count("SELECT SUM(stored_bytes) FROM state_blocks");
        f.db.exec("DELETE FROM state_blocks");
    }
    // Room for about two conversations' state.
    StateStore store =
        f.store("model-a", KvType::F32, static_cast<uint64_t>(one_conversation * 2.5));
    store.save(a, *evaluated_state(a));
    store.save(b, *evaluated_state(b));
    auto tmp = make_state(small_config(), 1024);
    EXPECT_EQ(store.restore(a, 0, *tmp), 64);  // a is now more recent than b
    store.save(c, *evaluated_state(c));        // over the cap: b goes, from its end

    auto probe = [&](const std::vector<int32_t>& t) {
        auto st = make_state(small_config(), 1024);
        return store.restore(t, 0, *st);
    };
    EXPECT_EQ(probe(a), 64);
    EXPECT_EQ(probe(c), 64);
    const int64_t b_left = probe(b);
    EXPECT_LT(b_left, 64);
    EXPECT_EQ(b_left % 16, 0) << "a chain loses its end first, never its middle";
    const StateStats st = read_state_stats(f.db);
    EXPECT_GT(st.blocks_evicted, 0);
    EXPECT_LE(st.stored_bytes, static_cast<int64_t>(one_conversation * 2.5));
    EXPECT_GT(st.bytes_evicted, 0);
}

// A hybrid's shape (lfm2-like: conv layers around one attention layer): the KV cache holds
// the attention layer only, the recurrent state the conv histories.
ModelConfig hybrid_config() {
    ModelConfig c = small_config();
    c.family = Family::Lfm2;
    c.n_embd = 8;
    c.layer_kinds = {LayerKind::ShortConv, LayerKind::Attention, LayerKind::ShortConv};
    c.kv_slot = {-1, 0, -1};
    c.n_kv_layers = 1;
    c.conv_kernel = 3;
    return c;
}

// A hybrid state holding `tokens`: KV rows as above, recurrent floats from the whole prefix.
std::unique_ptr<InferenceState> evaluated_hybrid(std::span<const int32_t> tokens) {
    auto st = make_state(hybrid_config(), 1024);
    KvCache& kv = st->kv;
    const auto n = static_cast<int64_t>(tokens.size());
    kv.reserve(n);
    for (int64_t l = 0; l < kv.n_layer(); ++l) {
        for (int64_t pos = 0; pos < n; ++pos) {
            for (int64_t i = 0; i < kv.k_width(); ++i) {
                kv.k_row(l, pos)[i] = element_value(tokens, pos, l, i, false);
                kv.v_row(l, pos)[i] = element_value(tokens, pos, l, i, true);
            }
        }
    }
    kv.set_length(n);
    auto& data = st->recurrent.data();
    for (size_t i = 0; i < data.size(); ++i) {
        data[i] = element_value(tokens, n - 1, 7, static_cast<int64_t>(i), false);
    }
    st->recurrent.set_position(n);
    return st;
}

TEST(StateStore, HybridRestoresOnlyWhereASnapshotWasTaken) {
    TempDir dir;
    Fixture f(dir.file("hybrid.db"));
    StateStore store = f.store();
    const auto turn1 = token_run(75, 10);
    auto src = evaluated_hybrid(turn1);
    ASSERT_FALSE(src->recurrent.empty());
    store.save(turn1, *src);
    EXPECT_EQ(store.take_warning(), "");
    EXPECT_EQ(read_state_stats(f.db).snapshots, 1);

    // The next turn's prompt extends the saved one: restored to exactly its end, recurrent
    // state included, bit for bit.
    const auto turn2 = concat(turn1, token_run(20, 500));
    auto dst = make_state(hybrid_config(), 1024);
    EXPECT_EQ(store.restore(turn2, 0, *dst), 75);
    EXPECT_TRUE(same_rows(src->kv, dst->kv, 75));
    EXPECT_EQ(dst->recurrent.data(), src->recurrent.data());
    EXPECT_EQ(dst->recurrent.position(), 75);

    // A prompt sharing only part of it (another question after the same start) gets nothing:
    // recurrent state cannot be cut back to the shared prefix.
    const auto other =
        concat(std::vector<int32_t>(turn1.begin(), turn1.begin() + 40), token_run(30, 900));
    auto none = make_state(hybrid_config(), 1024);
    EXPECT_EQ(store.restore(other, 0, *none), 0);
    EXPECT_EQ(none->kv.length(), 0);
    EXPECT_EQ(none->recurrent.position(), 0);
    // Nor does the saved prompt itself: one token must remain to evaluate.
    EXPECT_EQ(store.restore(turn1, 0, *none), 0);

    // A longer save keeps working; the newest snapshot serves the next turn.
    auto src2 = evaluated_hybrid(turn2);
    store.save(turn2, *src2);
    auto dst2 = make_state(hybrid_config(), 1024);
    const auto turn3 = concat(turn2, token_run(5, 42));
    EXPECT_EQ(store.restore(turn3, 0, *dst2), 95);
    EXPECT_EQ(dst2->recurrent.data(), src2->recurrent.data());

    // A damaged snapshot is dropped and reported; the state is left as it was.
    f.db.exec("UPDATE state_snapshots SET state = substr(state, 1, length(state) - 3)");
    auto bad = make_state(hybrid_config(), 1024);
    EXPECT_EQ(store.restore(turn3, 0, *bad), 0);
    EXPECT_EQ(bad->kv.length(), 0);
    EXPECT_EQ(bad->recurrent.position(), 0);
    EXPECT_NE(store.take_warning().find("dropped it"), std::string::npos);
}

// A turn stores two snapshots: at the end of its prompt (less the token generation starts
// from) and at the end of its reply. The reply's blocks extend the prompt's partial block,
// which must survive them: a next prompt that renders the reply differently (its thinking
// dropped, say) departs before the reply's end and resumes from the prompt's snapshot.
TEST(StateStore, HybridKeepsEachTurnsSnapshotsOnOneChain) {
    TempDir dir;
    Fixture f(dir.file("hybrid_chain.db"));
    StateStore store = f.store();
    const auto prompt = token_run(100, 10);
    const std::vector<int32_t> prompt_less_one(prompt.begin(), prompt.end() - 1);
    auto at_prompt = evaluated_hybrid(prompt_less_one);
    store.save(prompt_less_one, *at_prompt);
    const auto turn = concat(prompt, token_run(60, 700));
    auto at_reply = evaluated_hybrid(turn);
    store.save(turn, *at_reply);
    EXPECT_EQ(store.take_warning(), "");
    EXPECT_EQ(read_state_stats(f.db).snapshots, 2);

    const auto rerendered = concat(prompt, token_run(30, 300));
    auto dst = make_state(hybrid_config(), 1024);
    EXPECT_EQ(store.restore(rerendered, 0, *dst), 99);
    EXPECT_TRUE(same_rows(at_prompt->kv, dst->kv, 99));
    EXPECT_EQ(dst->recurrent.data(), at_prompt->recurrent.data());

    const auto next = concat(turn, token_run(5, 42));
    auto dst2 = make_state(hybrid_config(), 1024);
    EXPECT_EQ(store.restore(next, 0, *dst2), 160);
    EXPECT_EQ(dst2->recurrent.data(), at_reply->recurrent.data());
    // A state already past the prompt's snapshot is not sent back to it.
    EXPECT_EQ(store.restore(rerendered, 99, *dst), 99);
}

}  // namespace
}  // namespace ember::sessions
