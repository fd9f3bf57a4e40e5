#![cfg(not(feature = "loom"))]
