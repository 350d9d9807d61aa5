#include "grpc/infer_tensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace halo::grpc_frontend {

using serve::ApiError;
using serve::json;

namespace {

constexpr int64_t kMaxElements = int64_t(1) << 20;

[[noreturn]] void bad(const std::string& tensor, const std::string& message) {
  throw ApiError(400, fmt::format("input '{}': {}", tensor, message), tensor);
}

int64_t element_count(const inference::ModelInferRequest::InferInputTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape()) {
    if (d < 0) bad(t.name(), fmt::format("shape dimension {} is negative", d));
    if (d > kMaxElements || n * d > kMaxElements) bad(t.name(), "more than 2^20 elements");
    n *= d;
  }
  return n;
}

// Little-endian numbers out of raw bytes (x86 and ARM are little-endian).
template <typename T>
T load(const std::string& raw, size_t i) {
  T v;
  std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
  return v;
}

// The elements of one raw input.
json raw_elements(const std::string& name, const std::string& type, const std::string& raw,
                  int64_t n) {
  json out = json::array();
  if (type == "BYTES") {
    size_t pos = 0;
    while (pos < raw.size()) {
      if (raw.size() - pos < 4) bad(name, "a BYTES element's 4-byte length is cut off");
      uint32_t len = load<uint32_t>(raw.substr(pos, 4), 0);
      pos += 4;
      if (raw.size() - pos < len)
        bad(name, fmt::format("a BYTES element of {} bytes is cut off", len));
      out.push_back(raw.substr(pos, len));
      pos += len;
    }
    if (static_cast<int64_t>(out.size()) != n)
      bad(name, fmt::format("the shape says {} elements, the raw data holds {}", n, out.size()));
    return out;
  }
  auto fixed = [&](size_t size) {
    if (raw.size() != static_cast<size_t>(n) * size)
      bad(name, fmt::format("{} elements of {} take {} bytes, the raw data has {}", n, type,
                            n * size, raw.size()));
  };
  const size_t count = static_cast<size_t>(n);
  if (type == "BOOL") {
    fixed(1);
    for (size_t i = 0; i < count; ++i) out.push_back(raw[i] != 0);
  } else if (type == "INT8" || type == "INT16" || type == "INT32" || type == "INT64") {
    const size_t size = type == "INT8" ? 1 : type == "INT16" ? 2 : type == "INT32" ? 4 : 8;
    fixed(size);
    for (size_t i = 0; i < count; ++i)
      out.push_back(size == 1   ? int64_t(load<int8_t>(raw, i))
                    : size == 2 ? int64_t(load<int16_t>(raw, i))
                    : size == 4 ? int64_t(load<int32_t>(raw, i))
                                : load<int64_t>(raw, i));
  } else if (type == "UINT8" || type == "UINT16" || type == "UINT32" || type == "UINT64") {
    const size_t size = type == "UINT8" ? 1 : type == "UINT16" ? 2 : type == "UINT32" ? 4 : 8;
    fixed(size);
    for (size_t i = 0; i < count; ++i)
      out.push_back(size == 1   ? uint64_t(load<uint8_t>(raw, i))
                    : size == 2 ? uint64_t(load<uint16_t>(raw, i))
                    : size == 4 ? uint64_t(load<uint32_t>(raw, i))
                                : load<uint64_t>(raw, i));
  } else if (type == "FP32") {
    fixed(4);
    for (size_t i = 0; i < count; ++i) out.push_back(double(load<float>(raw, i)));
  } else if (type == "FP64") {
    fixed(8);
    for (size_t i = 0; i < count; ++i) out.push_back(load<double>(raw, i));
  } else {
    bad(name,
        fmt::format("datatype '{}' is not one halo reads (BYTES, BOOL, INT*, UINT*, FP32, FP64)",
                    type));
  }
  return out;
}

// The elements of one input given as typed contents.
json typed_elements(const inference::ModelInferRequest::InferInputTensor& t, int64_t n) {
  const auto& c = t.contents();
  const std::string& type = t.datatype();
  json out = json::array();
  auto take = [&](const auto& field) {
    if (field.size() != n)
      bad(t.name(), fmt::format("the shape says {} elements, the {} contents hold {}", n, type,
                                field.size()));
    for (const auto& v : field) out.push_back(v);
  };
  if (type == "BYTES")
    take(c.bytes_contents());
  else if (type == "BOOL")
    take(c.bool_contents());
  else if (type == "INT8" || type == "INT16" || type == "INT32")
    take(c.int_contents());
  else if (type == "INT64")
    take(c.int64_contents());
  else if (type == "UINT8" || type == "UINT16" || type == "UINT32")
    take(c.uint_contents());
  else if (type == "UINT64")
    take(c.uint64_contents());
  else if (type == "FP32")
    take(c.fp32_contents());
  else if (type == "FP64")
    take(c.fp64_contents());
  else
    bad(t.name(),
        fmt::format("datatype '{}' is not one halo reads (BYTES, BOOL, INT*, UINT*, FP32, FP64)",
                    type));
  return out;
}

// Inputs that must hold text, and those that must not.
void check_datatype(const inference::ModelInferRequest::InferInputTensor& t) {
  static constexpr std::string_view kText[] = {"text_input", "sampling_parameters", "bad_words",
                                               "stop_words", "stop"};
  const bool text = std::find(std::begin(kText), std::end(kText), t.name()) != std::end(kText);
  if (text && t.datatype() != "BYTES")
    bad(t.name(), fmt::format("must be BYTES, not {}", t.datatype()));
  if (!text && t.datatype() == "BYTES" && t.name() != "guided_decoding_guide" &&
      t.name() != "guided_decoding_guide_type")
    bad(t.name(), "a BYTES tensor where halo expects a number or a boolean");
}

}  // namespace

json parameter_json(const inference::InferParameter& p) {
  switch (p.parameter_choice_case()) {
    case inference::InferParameter::kBoolParam:
      return p.bool_param();
    case inference::InferParameter::kInt64Param:
      return p.int64_param();
    case inference::InferParameter::kStringParam:
      return p.string_param();
    case inference::InferParameter::kDoubleParam:
      return p.double_param();
    case inference::InferParameter::kUint64Param:
      return p.uint64_param();
    default:
      return nullptr;
  }
}

InferInputs read_inputs(const inference::ModelInferRequest& req) {
  InferInputs in;
  in.body = json::object();
  in.raw = req.raw_input_contents_size() > 0;
  if (in.raw && req.raw_input_contents_size() != req.inputs_size())
    throw ApiError(400,
                   fmt::format("{} raw_input_contents for {} inputs: give one per input, in order",
                               req.raw_input_contents_size(), req.inputs_size()),
                   "raw_input_contents");
  for (int i = 0; i < req.inputs_size(); ++i) {
    const auto& t = req.inputs(i);
    if (t.name().empty()) throw ApiError(400, fmt::format("input {} has no name", i), "inputs");
    if (in.body.contains(t.name())) bad(t.name(), "given twice");
    check_datatype(t);
    const int64_t n = element_count(t);
    json v = in.raw ? raw_elements(t.name(), t.datatype(), req.raw_input_contents(i), n)
                    : typed_elements(t, n);
    in.body[t.name()] = v.size() == 1 ? v[0] : v;
  }
  if (req.parameters_size() > 0) {
    json params = json::object();
    for (const auto& [k, v] : req.parameters()) params[k] = parameter_json(v);
    in.body["parameters"] = std::move(params);
  }
  return in;
}

inference::ModelInferResponse::InferOutputTensor& OutputWriter::add(const std::string& name,
                                                                    const char* datatype,
                                                                    size_t count) {
  auto* t = resp_.add_outputs();
  t->set_name(name);
  t->set_datatype(datatype);
  t->add_shape(static_cast<int64_t>(count));
  return *t;
}

void OutputWriter::bytes(const std::string& name, const std::vector<std::string>& values) {
  auto& t = add(name, "BYTES", values.size());
  if (!raw_) {
    for (const auto& v : values) t.mutable_contents()->add_bytes_contents(v);
    return;
  }
  std::string raw;
  for (const auto& v : values) {
    const uint32_t len = static_cast<uint32_t>(v.size());
    raw.append(reinterpret_cast<const char*>(&len), 4);
    raw += v;
  }
  resp_.add_raw_output_contents(std::move(raw));
}

void OutputWriter::uint32(const std::string& name, uint32_t value) {
  auto& t = add(name, "UINT32", 1);
  if (!raw_)
    t.mutable_contents()->add_uint_contents(value);
  else
    resp_.add_raw_output_contents(std::string(reinterpret_cast<const char*>(&value), 4));
}

void OutputWriter::fp32(const std::string& name, const std::vector<float>& values) {
  auto& t = add(name, "FP32", values.size());
  if (!raw_) {
    for (float v : values) t.mutable_contents()->add_fp32_contents(v);
    return;
  }
  resp_.add_raw_output_contents(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
}

}  // namespace halo::grpc_frontend
