// Where tests find the infer binary under test, the checkout and the reference fixtures. The
// paths are compiled into paths.cc alone: every other test object is then the same in every
// clone, so that ccache shares it between a checkout and CI's.
#pragma once

namespace infer::testing {

const char* InferBinary();  // the `infer` executable of this build
const char* SourceDir();    // the checkout (.cache/tokenizers, scripts/)
const char* FixturesDir();  // tests/fixtures

}  // namespace infer::testing
