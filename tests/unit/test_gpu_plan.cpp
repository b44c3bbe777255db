// Planning a model's split between a GPU and the CPU (engine/model/gpu_plan.h), and the sizes
// --gpu-memory takes: pure functions of byte counts, no GPU involved.
#include <gtest/gtest.h>

#include <cstdint>

#include "engine/model/gpu.h"
#include "engine/model/gpu_plan.h"

namespace ember {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Four layers of 100 MiB with 10 MiB of KV each, a 50 MiB embedding, a 60 MiB output and
// 30 MiB of scratch: 520 MiB with every layer and the output.
GpuSizes four_layers() {
    GpuSizes s;
    s.always = 50 * kMiB;
    s.output = 60 * kMiB;
    s.layer_bytes = {100 * kMiB, 100 * kMiB, 100 * kMiB, 100 * kMiB};
    s.layer_kv = {10 * kMiB, 10 * kMiB, 10 * kMiB, 10 * kMiB};
    s.scratch = 30 * kMiB;
    return s;
}

TEST(GpuSplit, WholeModelWhenItFits) {
    const GpuSplit split = plan_gpu_split(four_layers(), 580 * kMiB);
    EXPECT_TRUE(split.whole());
    EXPECT_EQ(split.layers, 4);
    EXPECT_EQ(split.weight_bytes, 510 * kMiB);  // 50 + 4 * 100 + 60
    EXPECT_EQ(split.kv_bytes, 40 * kMiB);
    EXPECT_EQ(split.need_bytes, 580 * kMiB);  // with the 30 MiB of scratch
}

TEST(GpuSplit, AsManyLayersAsFitWithoutTheOutput) {
    // One MiB short of the whole model: the output stays on the CPU and three layers fit
    // (50 + 3 * 110 + 30 = 410 MiB).
    const GpuSplit split = plan_gpu_split(four_layers(), 579 * kMiB);
    EXPECT_EQ(split.layers, 3);
    EXPECT_FALSE(split.whole());
    EXPECT_EQ(split.weight_bytes, 350 * kMiB);
    EXPECT_EQ(split.kv_bytes, 30 * kMiB);
    EXPECT_EQ(split.need_bytes, 410 * kMiB);
    // Exactly at a boundary, and one byte under it.
    EXPECT_EQ(plan_gpu_split(four_layers(), 300 * kMiB).layers, 2);
    EXPECT_EQ(plan_gpu_split(four_layers(), 300 * kMiB - 1).layers, 1);
    EXPECT_EQ(plan_gpu_split(four_layers(), 190 * kMiB).layers, 1);
}

TEST(GpuSplit, NothingWhenNotEvenOneLayerFits) {
    const GpuSplit split = plan_gpu_split(four_layers(), 189 * kMiB);
    EXPECT_EQ(split.layers, 0);
    EXPECT_EQ(split.weight_bytes, 0u);
    EXPECT_EQ(split.need_bytes, 0u);
}

TEST(GpuSplit, ForcedCountsAreClamped) {
    EXPECT_EQ(gpu_split_of(four_layers(), -3).layers, 0);
    EXPECT_EQ(gpu_split_of(four_layers(), 2).need_bytes, 300 * kMiB);
    EXPECT_TRUE(gpu_split_of(four_layers(), 99).whole());
    EXPECT_EQ(gpu_split_of(four_layers(), 99).layers, 4);
}

TEST(GpuSplit, UnevenLayersStopAtTheFirstThatDoesNotFit) {
    GpuSizes s = four_layers();
    s.layer_bytes = {100 * kMiB, 300 * kMiB, 10 * kMiB, 10 * kMiB};
    // Layer 1 does not fit after layer 0: the GPU takes a prefix of the layers, never a gap.
    EXPECT_EQ(plan_gpu_split(s, 300 * kMiB).layers, 1);
}

TEST(GpuSplit, ASplitsScratchShrinksWithItsShare) {
    // A split of l layers takes split_scratch[l]; the whole model keeps `scratch`.
    GpuSizes s = four_layers();
    s.split_scratch = {0, 5 * kMiB, 10 * kMiB, 15 * kMiB};
    EXPECT_EQ(gpu_split_of(s, 1).scratch_bytes, 5 * kMiB);
    EXPECT_EQ(gpu_split_of(s, 1).need_bytes, 165 * kMiB);  // 50 + 110 + 5
    EXPECT_EQ(gpu_split_of(s, 3).need_bytes, 395 * kMiB);  // 50 + 3 * 110 + 15
    EXPECT_EQ(gpu_split_of(s, 4).scratch_bytes, 30 * kMiB);
    EXPECT_EQ(gpu_split_of(s, 4).need_bytes, 580 * kMiB);
    // One layer needs 165 MiB with its 5 MiB of scratch (190 with the whole model's 30).
    EXPECT_EQ(plan_gpu_split(s, 165 * kMiB).layers, 1);
    EXPECT_EQ(plan_gpu_split(s, 164 * kMiB).layers, 0);
    EXPECT_EQ(plan_gpu_split(s, 395 * kMiB).layers, 3);
    EXPECT_EQ(plan_gpu_split(s, 579 * kMiB).layers, 3);
    EXPECT_TRUE(plan_gpu_split(s, 580 * kMiB).whole());
    // Fewer entries than layers: `scratch` for the rest.
    s.split_scratch = {0, 5 * kMiB};
    EXPECT_EQ(gpu_split_of(s, 2).scratch_bytes, 30 * kMiB);
}

TEST(MemorySize, Units) {
    EXPECT_EQ(parse_memory_size("6GiB"), 6 * (uint64_t{1} << 30));
    EXPECT_EQ(parse_memory_size("6000MiB"), 6000 * kMiB);
    EXPECT_EQ(parse_memory_size("6000mb"), 6000 * kMiB);
    EXPECT_EQ(parse_memory_size("6G"), 6 * (uint64_t{1} << 30));
    EXPECT_EQ(parse_memory_size("1.5GiB"), 1536 * kMiB);
    EXPECT_EQ(parse_memory_size("2 TiB"), uint64_t{2} << 40);
    EXPECT_EQ(parse_memory_size("4096"), 4096u);
    EXPECT_EQ(parse_memory_size("4096B"), 4096u);
    EXPECT_EQ(parse_memory_size("512KiB"), 512u << 10);
}

TEST(MemorySize, BadValues) {
    for (const char* bad : {"", "GiB", "-1GiB", "6 parsecs", "6GiBs", "0", "0MiB", "1.2.3G", ".",
                            "99999999999TiB", "six"}) {
        EXPECT_FALSE(parse_memory_size(bad).has_value()) << bad;
    }
}

TEST(MemorySize, Format) {
    EXPECT_EQ(format_memory_size(420 * kMiB), "420 MiB");
    EXPECT_EQ(format_memory_size(5 * (uint64_t{1} << 30) + 100 * kMiB), "5.1 GiB");
}

TEST(GpuLayers, Parse) {
    EXPECT_EQ(parse_gpu_layers("0"), 0);
    EXPECT_EQ(parse_gpu_layers("20"), 20);
    EXPECT_EQ(parse_gpu_layers("all"), INT64_MAX);
    EXPECT_FALSE(parse_gpu_layers("-1").has_value());
    EXPECT_FALSE(parse_gpu_layers("half").has_value());
    EXPECT_FALSE(parse_gpu_layers("").has_value());
}

}  // namespace
}  // namespace ember
