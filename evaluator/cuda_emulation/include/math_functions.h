#pragma once
#include "agentforge_emu/runtime.h"
