#pragma once
#include "agentforge_emu/runtime.h"
#define CUDART_INF_F std::numeric_limits<float>::infinity()
#define CUDART_NAN_F std::numeric_limits<float>::quiet_NaN()
#define CUDART_INF std::numeric_limits<double>::infinity()
#define CUDART_PI_F 3.141592654f
#define CUDART_PI 3.1415926535897931e+0
