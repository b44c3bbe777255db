// Where a command's model runs, as given on its command line: --gpu, --gpu-layers, --gpu-memory,
// --tensor-decode, --no-tensor-decode
// (load_model.h parses them into engine/model/gpu.h's GpuRequest).
#pragma once

#include <string>
#include <vector>

namespace ember::app {

struct GpuOptions {
    std::string where = "auto";     // --gpu auto|off|N
    std::string layers;             // --gpu-layers N|all; empty: as many as fit
    std::string memory;             // --gpu-memory SIZE ("6GiB"); empty: the card's free memory
    bool tensor_decode = false;     // --tensor-decode
    bool no_tensor_decode = false;  // --no-tensor-decode
    // The command's own default for the tensor-core decode products when neither flag is given
    // (for_server sets it).
    bool tensor_decode_by_default = false;

    // These options for a server of `parallel` slots (serve, bench-serve's own): several
    // slots take the tensor-core decode products unless told otherwise, since their steps
    // batch (docs/serve.md).
    GpuOptions for_server(int parallel) const {
        GpuOptions server = *this;
        server.tensor_decode_by_default = parallel > 1;
        return server;
    }

    // Whether the decode products go to the tensor cores.
    bool wants_tensor_decode() const {
        return tensor_decode || (tensor_decode_by_default && !no_tensor_decode);
    }

    // The same options for another ember process's command line.
    std::vector<std::string> arguments() const {
        std::vector<std::string> args{"--gpu", where};
        if (!layers.empty()) args.insert(args.end(), {"--gpu-layers", layers});
        if (!memory.empty()) args.insert(args.end(), {"--gpu-memory", memory});
        if (tensor_decode) args.emplace_back("--tensor-decode");
        if (no_tensor_decode) args.emplace_back("--no-tensor-decode");
        return args;
    }
};

}  // namespace ember::app
