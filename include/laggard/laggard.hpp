// laggard — umbrella header: finds the slow rank, the slow stage and the moment a distributed
// training job got slower. Pipeline: sources (recorder, JSONL, profiler traces) → StepSample → analysis → sinks.
#pragma once

#include "laggard/analyzer.hpp"
#include "laggard/compare.hpp"
#include "laggard/cuda.hpp"
#include "laggard/detector.hpp"
#include "laggard/detector_settings.hpp"
#include "laggard/export.hpp"
#include "laggard/html_report.hpp"
#include "laggard/jsonl.hpp"
#include "laggard/log.hpp"
#include "laggard/model.hpp"
#include "laggard/onset.hpp"
#include "laggard/prometheus.hpp"
#include "laggard/recorder.hpp"
#include "laggard/scale.hpp"
#include "laggard/source.hpp"
#include "laggard/summary.hpp"
#include "laggard/timeline.hpp"
#include "laggard/trace.hpp"
#include "laggard/transport.hpp"
#include "laggard/version.hpp"
