#pragma once
// Llama 3's registry entry: its flavors (torchtitan's llama3 flavors) and HF format.
#include "ctitan/models/model_spec.h"

namespace ctitan::models::llama3 {

ModelSpec spec();

}  // namespace ctitan::models::llama3
