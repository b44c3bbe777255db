// The state store with its model on the GPU, as a new `ember chat --continue` process uses it:
// blocks saved from the device's rows are stored as they are (state_store.cpp: rows_packing, a
// restore there being as fast as the host inflates), and a new conversation's state, attached
// to the device before the restore as Conversation does, takes them onto the device alone and
// continues as the saved state did, bit for bit; its host rows come back from the device when
// serialized.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/model/compute_device.h"
#include "engine/model/state_io.h"
#include "sessions/blob_codec.h"
#include "sessions/schema.h"
#include "sessions/sqlite.h"
#include "sessions/state_store.h"
#include "tests/gpu/gpu_support.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference_logits.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

constexpr int kSteps = 12;

int64_t sum_of(sessions::Database& db, const char* sql) {
    sessions::Statement s = db.prepare(sql);
    s.step();
    return s.column_int(0);
}

TEST(GpuStateStore, RowsStoredAsTheyAreAndRestoredOntoTheDeviceAlone) {
    EMBER_REQUIRE_GPU();
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    const std::unique_ptr<Model> model =
        load_fixture_model(fixture_path("arch/qwen3/qwen3.gguf"), true);
    const json ref = json::parse(read_file(fixture_path("arch/qwen3/ref.json")));
    const std::vector<int32_t> prompt = ids_of(ref["seqs"]["long"]);
    const auto n = static_cast<int64_t>(prompt.size());
    ThreadPool pool(2);
    sessions::StateStoreOptions options;
    options.block_tokens = 16;
    ASSERT_GE(n, 3 * options.block_tokens) << "the prompt is too short for a chain of blocks";

    TempDir dir{"ember-gpu-store"};
    sessions::Database db(dir.file("s.db"));
    sessions::migrate(db);
    const auto positions = n + kSteps + 8;
    auto saved = make_state(model->config(), positions, KvType::F16);
    const auto logits = forward(*model, *saved, pool, prompt, LogitsWanted::Last);
    const std::vector<float> last(logits.begin(), logits.end());
    {
        sessions::StateStore store(db, *model, KvType::F16, options);
        store.save(prompt, *saved);
        EXPECT_EQ(store.take_warning(), "");
    }
    const int64_t raw = sum_of(db, "SELECT SUM(raw_bytes) FROM state_blocks");
    const int64_t stored = sum_of(db, "SELECT SUM(stored_bytes) FROM state_blocks");
    ASSERT_GT(raw, 0) << "nothing was stored";
    // As they are (x1.00 and zstd's framing), where the CPU's packing, byte planes at level 3,
    // shrinks these rows by more than 5%.
    const std::vector<uint8_t> rows = serialize_kv_rows(saved->kv, 0, n);
    const auto planes_level_3 = static_cast<int64_t>(sessions::pack_blob(rows, 3, 2).size());
    ASSERT_LT(planes_level_3 * 100, static_cast<int64_t>(rows.size()) * 95)
        << "the fixture's rows compress too little to tell the packings apart";
    EXPECT_GE(stored * 100, raw * 98) << "stored " << stored << " bytes of " << raw;
    EXPECT_LE(stored, raw + raw / 50) << "stored " << stored << " bytes of " << raw;
    const GreedyRun cold = greedy_from(*model, *saved, pool, last, kSteps);

    sessions::StateStore store(db, *model, KvType::F16, options);  // a new process's
    auto resumed = make_state(model->config(), positions, KvType::F16);
    model->device()->attach(*resumed);
    ASSERT_TRUE(resumed->kv.restores_to_device());
    ASSERT_EQ(store.restore(prompt, 0, *resumed), n);
    EXPECT_EQ(resumed->kv.length(), n);
    const KvCache& host = resumed->kv;  // const: reading asks the mirror nothing
    const std::vector<uint8_t> zeros(static_cast<size_t>(host.k_row_bytes()), 0);
    EXPECT_EQ(0, std::memcmp(host.k_data(0, n / 2), zeros.data(), zeros.size()))
        << "the restore wrote the host's rows";
    EXPECT_EQ(serialize_kv_rows(resumed->kv, 0, n), serialize_kv_rows(saved->kv, 0, n));
    expect_same_bits(greedy_from(*model, *resumed, pool, last, kSteps), cold);
}

}  // namespace
}  // namespace ember::test
