#pragma once
#include "agentforge_emu/cooperative_groups.h"
