// A device other than the CPU that a model's layers run on (a GPU): it holds the model's
// weights in its own memory and makes the backend (backend.h) of one forward pass over a
// conversation's state. Model::attach_device() hands a model to one; forward() then runs there.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ember {

class Backend;
struct InferenceState;

class ComputeDevice {
public:
    virtual ~ComputeDevice() = default;
    // Where the model runs, for `ember info` and the status line: "GPU 0: NVIDIA H100 80GB HBM3".
    virtual std::string description() const = 0;
    // The backend of one forward pass on `state` (creating the state's DeviceState on first use).
    virtual std::unique_ptr<Backend> make_backend(InferenceState& state) = 0;
    // The backend of one decode step of several conversations at once (forward.h's
    // decode_batch): token t of the batch is states[t]'s next token, each at its own position
    // over its own KV rows, with the bits each would get alone. Null where the device does not
    // batch these states (a hybrid's recurrent mixers, a model split with the CPU, KV layouts
    // that differ): they then go one at a time.
    virtual std::unique_ptr<Backend> make_batch_backend(std::span<InferenceState* const> states) {
        (void)states;
        return nullptr;
    }
    // Creates the device's share of `state` now (make_backend would on first use), so that a
    // restore about to write the state's KV rows can copy them to the device as it goes
    // (KvMirror::host_rows_restored) rather than all at the next forward pass.
    virtual void attach(InferenceState& state) = 0;
    // Prompt tokens per second the device is taken to evaluate this model at before the
    // engine has timed a prompt (resume_plan.h: whether restoring stored state pays). A rough
    // figure from the chip's peak; the first timed prompt replaces it.
    virtual double assumed_prefill_tokens_per_second() const = 0;
    // Bytes of device memory the weights take.
    virtual uint64_t weight_bytes() const = 0;
    // Layers [0, layers()) run on the device, the rest on the CPU (a model larger than the
    // device's memory: gpu_plan.h); n_layer when the whole model runs there.
    virtual int64_t layers() const = 0;
    // Device memory taken since the device was made (weights, states, scratch, library
    // workspaces; not the driver's context), as the device reports its free memory.
    virtual uint64_t memory_in_use() const = 0;
    // The device memory's bandwidth, `passes` timed copies of `bytes` within it, each counted
    // as bytes read plus bytes written (1e9 bytes per second): what bounds decode there.
    virtual std::vector<double> measure_bandwidth_gbs(uint64_t bytes, int passes) = 0;
};

}  // namespace ember
