module sforge/helper

go 1.19
