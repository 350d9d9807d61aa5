// The test binaries' precompiled header: the serving code's plus GoogleTest
// (cmake/HaloPch.cmake).
#pragma once
#include <gtest/gtest.h>

#include "halo_pch.h"
