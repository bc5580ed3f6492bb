//! Integration tests of vramkit-fuzz (one binary; one module per topic).

mod corpus;
