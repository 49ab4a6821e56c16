// One real service for these suites (the chaos test has its own).
import "./support/context.js";
import "./suites/contract.js";
import "./suites/operations.js";
import "./suites/retry.js";
