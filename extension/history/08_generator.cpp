// Earlier versions of parts that chapter 08 shows and a later cell revises.
// Not part of the torch_ember package (extension/csrc holds the latest
// versions); the chapter's builds compile them. See book/sync.py.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

// ember-book: begin random_registration.v1
// Every random operator with a Generator argument that ember implements;
// the others (geometric_, cauchy_, log_normal_, ...) still reach the CPU
// fallback, which refuses them.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("uniform_", &ember::uniform_);
  m.impl("normal_", &ember::normal_);
  m.impl("exponential_", &ember::exponential_);
  m.impl("bernoulli_.float", &ember::bernoulliScalar_);
  m.impl("bernoulli_.Tensor", &ember::bernoulliTensor_);
  m.impl("random_", &ember::random_);
  m.impl("random_.to", &ember::randomTo_);
  m.impl("random_.from", &ember::randomFrom_);
  m.impl("randperm.generator_out", &ember::randpermOut);
  m.impl("multinomial", &ember::multinomial);
  m.impl("multinomial.out", &ember::multinomialOut);
  m.impl("native_dropout", &ember::nativeDropout);
  m.impl("native_dropout_backward", &ember::nativeDropoutBackward);
}
// ember-book: end random_registration.v1
