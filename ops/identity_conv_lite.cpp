// my_ops::identity_conv_op's lite entry (libidentity_conv_ops_lite.so, no libtorch): what a lite model library
// calls in place of the op (docs/lite.md), on identity_conv_kernel.h's kernel, the full library's.
#include <pt2rt/lite_op.h>

#include <string>

#include "identity_conv_kernel.h"

namespace lite = pt2rt::lite_op;

PT2RT_LITE_OP_SCHEMA(my_ops, identity_conv_op, "my_ops::identity_conv_op(Tensor x) -> Tensor");

PT2RT_LITE_OP(my_ops, identity_conv_op)(AtenTensorHandle x, AtenTensorHandle* ret0) {
  return lite::guarded("identity_conv_op", [&] {
    const lite::TensorRef in(x);
    // check_input's rules (my_ops.cpp), in its words
    if (in.dim() != 4) {
      throw std::invalid_argument("expected a 4-D NCHW tensor, got a " + std::to_string(in.dim()) + "-D tensor");
    }
    const lite::Dtype t = in.dtype();
    if (t != lite::Dtype::Float32 && t != lite::Dtype::Float64 && t != lite::Dtype::Float16 &&
        t != lite::Dtype::BFloat16) {
      throw std::invalid_argument(std::string("expected dtype float32, float64, float16 or bfloat16, got ") +
                                  lite::dtype_name(t));
    }
    lite::Tensor out = lite::Tensor::empty_like(in);
    const auto parallel_for = [](int64_t begin, int64_t end, int64_t grain, const auto& f) {
      lite::parallel_for(begin, end, grain, f);
    };
    my_ops::kernels::identity_conv(in.data(), in.sizes(), in.strides(), out.ref().data(), out.ref().strides(),
                                   static_cast<int64_t>(lite::element_size(t)), parallel_for);
    *ret0 = out.release();
  });
}
