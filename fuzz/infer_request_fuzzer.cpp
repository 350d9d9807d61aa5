// gRPC ModelInferRequests (KServe v2 / Triton), as the gRPC frontend reads
// them: the input is a serialized ModelInferRequest; one that parses has its
// tensors (typed or raw contents) read into the generate request's JSON
// (grpc/infer_tensors.h), which must be an object with a text_input of the
// request, and an answer is written in the same form. Refusals (a 400
// naming the tensor) are expected.
#include "fuzz_util.h"
#include "grpc/infer_tensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halo::fuzz::quiet();
  inference::ModelInferRequest req;
  if (size > 1 << 16 || !req.ParseFromArray(data, static_cast<int>(size))) return 0;
  halo::fuzz::guarded([&] {
    const auto in = halo::grpc_frontend::read_inputs(req);
    if (!in.body.is_object() || in.raw != (req.raw_input_contents_size() > 0)) __builtin_trap();
    inference::ModelInferResponse resp;
    halo::grpc_frontend::OutputWriter w(resp, in.raw);
    w.bytes("text_output", {in.body.value("text_input", std::string("x"))});
    w.uint32("num_output_tokens", 1);
    if (resp.outputs_size() != 2 || (in.raw && resp.raw_output_contents_size() != 2)) __builtin_trap();
  });
  return 0;
}
