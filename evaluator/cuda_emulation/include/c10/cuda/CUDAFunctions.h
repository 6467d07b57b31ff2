#pragma once
#include "agentforge_emu/torch_cuda.h"
